"""Unit tests for knoblab.timeseries: warm-up, windows, stalls, batch means, honest comparisons."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import signal
from scipy import stats as sps

from knoblab.timeseries import (
    SeriesSummary,
    batch_means,
    batch_size,
    compare_series,
    stall_runs,
    steady_window,
    summarize_series,
    warmup_end,
)


def ar1(rng: np.random.Generator, rows: int, n: int, phi: float = 0.9) -> np.ndarray:
    """`rows` stationary AR(1) series (innovation sd 1); a burn-in drops the start-up transient."""
    burn = 200  # 0.9**200 ~ 1e-9
    e = rng.standard_normal((rows, n + burn))
    return signal.lfilter([1.0], [1.0, -phi], e, axis=1)[:, burn:]


def ramp_then_flat(seed: int, n: int = 300, ramp: int = 30) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate(
        [np.linspace(0.0, 1000.0, ramp, endpoint=False), rng.normal(1000.0, 10.0, n - ramp)]
    )


# --------------------------------------------------------------------------- warmup_end


def test_warmup_end_finds_ramp():
    assert 25 <= warmup_end(ramp_then_flat(0)) <= 40
    # MSER sometimes over-truncates a little on noise, but never stops inside the ramp.
    ends = [warmup_end(ramp_then_flat(seed)) for seed in range(20)]
    assert min(ends) >= 30
    assert 25 <= np.median(ends) <= 40


def test_warmup_end_stationary_keeps_almost_everything():
    x = np.random.default_rng(1).normal(1000.0, 10.0, 600)
    assert warmup_end(x) <= 60


def test_warmup_end_short_and_batch():
    assert warmup_end([0, 0, 0, 1000, 1000, 1000, 1000, 1000, 1000]) == 0  # < 2 batches
    assert warmup_end([]) == 0
    # Batch 1: the truncation point is in seconds and lands exactly after the outliers.
    assert warmup_end([0, 0] + [100, 101] * 10, batch=1) == 2
    with pytest.raises(ValueError):
        warmup_end([1.0] * 20, batch=0)


# --------------------------------------------------------------------------- steady_window


def test_steady_window_warmup_and_last():
    v = list(range(100))
    assert steady_window(v, warmup=10) == (10, 100)
    assert steady_window(v, warmup=10, last=30) == (70, 100)
    assert steady_window(v, warmup=80, last=30) == (80, 100)  # the later start wins
    assert steady_window(v, warmup=0) == (0, 100)


def test_steady_window_default_uses_mser():
    x = ramp_then_flat(0)
    assert steady_window(x) == (warmup_end(x), len(x))


def test_steady_window_never_empty():
    v = [1.0, 2.0, 3.0]
    assert steady_window(v, warmup=10) == (2, 3)
    assert steady_window(v, warmup=3) == (2, 3)
    assert steady_window(v, warmup=0, last=0) == (2, 3)
    assert steady_window([], warmup=0) == (0, 0)


def test_steady_window_rejects_negative():
    with pytest.raises(ValueError):
        steady_window([1.0, 2.0], warmup=-1)
    with pytest.raises(ValueError):
        steady_window([1.0, 2.0], last=-1)


# --------------------------------------------------------------------------- stalls


def test_stall_runs_exact():
    v = [5, 0, 50, 50, 1, 2, 50, 0]
    assert stall_runs(v, 10) == [(0, 2), (4, 2), (7, 1)]
    assert stall_runs(v, 0) == []  # strictly below
    assert stall_runs(v, 100) == [(0, 8)]
    assert stall_runs([], 1) == []


@given(st.lists(st.integers(0, 20), max_size=40), st.integers(0, 20))
def test_stall_runs_cover_exactly_the_low_seconds(values, threshold):
    runs = stall_runs(values, threshold)
    covered = [i for start, length in runs for i in range(start, start + length)]
    assert covered == [i for i, v in enumerate(values) if v < threshold]
    assert all(length >= 1 for _, length in runs)
    # Maximal runs: two runs never touch.
    assert all(s1 + n1 < s2 for (s1, n1), (s2, _) in zip(runs, runs[1:], strict=False))


def test_summarize_series_hand_computed():
    v = [100, 100, 100, 5, 0, 0, 100, 3, 100, 100]
    s = summarize_series(v, warmup=0)
    # sum 608 -> mean 60.8; sorted [0, 0, 3, 5, 100 x 6] -> median 100, threshold 10
    # squared deviations: 6*39.2^2 + 55.8^2 + 2*60.8^2 + 57.8^2 = 23067.6
    stdev = math.sqrt(23067.6 / 9)
    assert s == SeriesSummary(
        start=0, end=10, n=10,
        mean=pytest.approx(60.8), median=100.0, stdev=pytest.approx(stdev),
        cv=pytest.approx(stdev / 60.8), minimum=0.0, maximum=100.0,
        stall_threshold=pytest.approx(10.0),
        stall_seconds=4,  # 5, 0, 0 and 3
        zero_seconds=2,
        longest_stall=3,  # 5, 0, 0
    )  # fmt: skip


def test_summarize_series_window():
    v = [0, 0, 0, 100, 100, 40, 100, 100]
    s = summarize_series(v, warmup=3, stall_fraction=0.5)  # the start-up zeros are not stalls
    assert (s.start, s.end, s.n) == (3, 8, 5)
    assert (s.median, s.stall_threshold, s.stall_seconds, s.zero_seconds) == (100, 50, 1, 0)
    t = summarize_series(v, warmup=0, last=2)
    assert (t.start, t.n, t.mean, t.stdev, t.cv, t.longest_stall) == (6, 2, 100, 0, 0, 0)


def test_summarize_series_zero_mean_and_bad_input():
    s = summarize_series([0, 0, 0], warmup=0)
    assert (s.cv, s.stall_seconds, s.zero_seconds) == (0.0, 0, 3)
    assert summarize_series([0.0], warmup=0).stdev == 0.0
    assert summarize_series([-1.0, 1.0], warmup=0).cv == math.inf
    with pytest.raises(ValueError):
        summarize_series([])
    with pytest.raises(ValueError):
        summarize_series([1.0, math.nan], warmup=0)
    with pytest.raises(ValueError):
        summarize_series([1.0, 2.0], stall_fraction=-0.1)


# --------------------------------------------------------------------------- batches


def test_batch_size_tracks_autocorrelation():
    rng = np.random.default_rng(2)
    assert batch_size(rng.standard_normal(2000)) <= 6  # 4 tau with tau ~ 1
    assert batch_size(ar1(rng, 1, 2000)[0]) >= 10  # tau = (1 + 0.9) / (1 - 0.9) = 19
    assert batch_size([7.0] * 100) == 1
    assert batch_size([1.0, 5.0, 2.0]) == 1  # n < 5
    # Capped so that at least 5 batches remain.
    assert batch_size(ar1(rng, 1, 50, phi=0.99)[0]) <= 10


def test_batch_means_exact():
    v = [1, 2, 3, 4, 5, 6, 7]
    assert batch_means(v, 3) == [2.0, 5.0]  # the trailing 7 is dropped
    assert batch_means(v, 1) == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    assert batch_means(v, 7) == [4.0]
    assert batch_means(v, 8) == []
    assert batch_means([3.0] * 10) == [3.0] * 10  # size None -> batch_size -> 1
    with pytest.raises(ValueError):
        batch_means(v, 0)


# --------------------------------------------------------------------------- compare_series


def test_naive_test_is_fooled_by_autocorrelation_but_batch_means_are_not():
    # The reason this module exists: equal-mean settings must not look different.
    # 1000 pairs: the rejection rate is itself an estimate (sd ~0.009 at 0.08), keep it tight.
    rng = np.random.default_rng(3)
    pairs, n, alpha = 1000, 600, 0.05
    a, b = ar1(rng, pairs, n), ar1(rng, pairs, n)
    naive = np.mean(sps.ttest_ind(a, b, axis=1, equal_var=False).pvalue < alpha)
    honest = np.mean([compare_series(x, y) < alpha for x, y in zip(a, b, strict=True)])
    assert naive > 0.25  # treats 600 correlated seconds as 600 samples (~0.65 in practice)
    assert honest < 0.10
    # ...while still seeing a real difference: one stationary stdev (sqrt(1/(1-0.81)) ~ 2.3).
    shift = 1.0 / math.sqrt(1.0 - 0.9**2)
    power = np.mean([compare_series(x, y + shift) < alpha for x, y in zip(a, b, strict=True)])
    assert power > 0.80


def test_compare_series_obvious_difference():
    rng = np.random.default_rng(4)
    assert compare_series(rng.normal(100, 5, 300), rng.normal(200, 5, 300)) < 1e-6
    x = rng.normal(100, 5, 300)
    assert compare_series(x, x) == pytest.approx(1.0)


def test_compare_series_degenerate():
    assert compare_series([1.0], [1.0, 2.0, 3.0]) == 1.0  # one batch: no variance estimate
    assert compare_series([], []) == 1.0
    assert compare_series([5.0] * 20, [5.0] * 20) == 1.0
    assert compare_series([5.0] * 20, [6.0] * 20) == 0.0
    noisy = np.random.default_rng(5).normal(5.0, 1.0, 20)
    p = compare_series([5.0] * 20, noisy)  # one side constant: still a real test
    assert 0.0 < p < 1.0
