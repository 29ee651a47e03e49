"""Unit tests for knoblab.stats, checked against hand-computed values."""

import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats as sps
from scipy.stats import norm
from scipy.stats import t as student_t

from knoblab.stats import (
    Levels,
    Summary,
    holm,
    judge,
    p_equivalent,
    p_value,
    relative_spread,
    sequential_levels,
    speed_levels,
    summarize,
)

# --------------------------------------------------------------------------- holm


def test_holm_hand_computed():
    # sorted: 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> max(0.06, 0.04)=0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-15)


def test_holm_caps_at_one():
    # 0.3*3=0.9, 0.4*2=0.8 -> 0.9 (monotone), 0.5*1=0.5 -> 0.9; 0.6*3 would be 1.8 -> 1.0
    assert holm([0.4, 0.3, 0.5]) == pytest.approx([0.9, 0.9, 0.9])
    assert holm([0.6, 0.7]) == [1.0, 1.0]


def test_holm_monotone_step_down():
    # Raw 0.02*2 = 0.04 but the smaller p was already raised to 0.05 -> 0.05.
    assert holm([0.025, 0.02]) == pytest.approx([0.04, 0.04])
    assert holm([0.02, 0.025]) == pytest.approx([0.04, 0.04])
    assert holm([0.04, 0.01, 0.011]) == pytest.approx([0.04, 0.03, 0.03])


def test_holm_trivial_and_invalid():
    assert holm([]) == []
    assert holm([0.2]) == [0.2]
    with pytest.raises(ValueError):
        holm([0.1, 1.5])
    with pytest.raises(ValueError):
        holm([math.nan])


@given(st.lists(st.floats(min_value=0.0, max_value=1.0), max_size=30))
def test_holm_properties(ps):
    adj = holm(ps)
    assert len(adj) == len(ps)
    assert all(0.0 <= q <= 1.0 for q in adj)
    assert all(q >= p for p, q in zip(ps, adj, strict=True))
    for i in range(len(ps)):
        for j in range(len(ps)):
            if ps[i] <= ps[j]:
                assert adj[i] <= adj[j]


# ------------------------------------------------------------------------ p_value


def test_mann_whitney_fully_separated_exact():
    a = [1.0, 2.0, 3.0, 4.0, 5.0]
    b = [6.0, 7.0, 8.0, 9.0, 10.0]
    # Exact two-sided: 2 extreme rankings out of C(10, 5) = 252.
    assert p_value(a, b, "mann-whitney") == pytest.approx(2 / 252, abs=1e-12)
    assert p_value(b, a, "mann-whitney") == pytest.approx(2 / 252, abs=1e-12)


def test_mann_whitney_degenerate():
    assert p_value([1.0], [2.0, 3.0], "mann-whitney") == 1.0
    assert p_value([2.0, 2.0, 2.0], [2.0, 2.0], "mann-whitney") == 1.0


def test_welch_log_hand_computed():
    a = [1.0, 2.0, 4.0]
    b = [3.0, 5.0, 9.0, 11.0]
    la, lb = [math.log(v) for v in a], [math.log(v) for v in b]
    ma, mb = sum(la) / len(la), sum(lb) / len(lb)
    va = sum((v - ma) ** 2 for v in la) / (len(la) - 1)
    vb = sum((v - mb) ** 2 for v in lb) / (len(lb) - 1)
    sa, sb = va / len(la), vb / len(lb)
    t = (ma - mb) / math.sqrt(sa + sb)
    df = (sa + sb) ** 2 / (sa**2 / (len(la) - 1) + sb**2 / (len(lb) - 1))
    expected = 2 * sps.t.sf(abs(t), df)
    got = p_value(a, b, "welch-log")
    assert got == pytest.approx(expected, abs=1e-12)
    assert 0.05 < got < 0.5  # sanity: the data differ, but not decisively
    assert p_value(b, a) == pytest.approx(expected, abs=1e-12)  # default test, symmetric


def test_welch_log_is_scale_invariant():
    # Multiplicative model: rescaling both groups (ms -> s) must not change the p-value.
    a, b = [10.0, 11.0, 12.0], [13.0, 12.5, 14.0]
    assert p_value(a, b) == pytest.approx(p_value([x / 1000 for x in a], [x / 1000 for x in b]))


def test_welch_log_degenerate():
    assert p_value([5.0], [1.0, 2.0, 3.0]) == 1.0
    assert p_value([1.0, 2.0], [7.0]) == 1.0
    assert p_value([3.0, 3.0, 3.0], [3.0, 3.0]) == 1.0
    assert p_value([3.0, 3.0, 3.0], [4.0, 4.0]) == 0.0
    one_constant = p_value([3.0, 3.0, 3.0], [4.0, 4.1, 3.9])
    assert 0.0 < one_constant < 1.0 and not math.isnan(one_constant)


@pytest.mark.parametrize("bad", [[1.0, 0.0, 2.0], [1.0, -2.0]])
def test_welch_log_rejects_non_positive(bad):
    with pytest.raises(ValueError):
        p_value(bad, [1.0, 2.0])
    with pytest.raises(ValueError):
        p_value([1.0, 2.0], bad)


def test_unknown_test_rejected():
    with pytest.raises(ValueError):
        p_value([1.0, 2.0], [3.0, 4.0], "t-test")  # type: ignore[arg-type]


# ---------------------------------------------------------------------- summarize


def test_summarize_odd_and_even():
    s = summarize([3.0, 1.0, 2.0])
    assert (s.n, s.median, s.mean, s.minimum, s.maximum) == (3, 2.0, 2.0, 1.0, 3.0)
    assert s.stdev == pytest.approx(1.0)
    s = summarize([4.0, 1.0, 3.0, 2.0])
    assert s.median == 2.5
    assert s.mean == 2.5
    assert s.stdev == pytest.approx(math.sqrt(5 / 3))  # squared deviations sum 5, ddof=1


def test_summarize_ci():
    s = summarize([10.0, 12.0, 11.0, 13.0, 9.0, 10.5, 11.5])
    assert s.minimum <= s.ci_low <= s.median <= s.ci_high <= s.maximum
    assert s.ci_low < s.ci_high
    narrow = summarize([10.0, 12.0, 11.0, 13.0, 9.0, 10.5, 11.5], confidence=0.5)
    assert s.ci_low <= narrow.ci_low and narrow.ci_high <= s.ci_high


def test_summarize_deterministic():
    data = [5.1, 4.9, 5.3, 5.0, 5.7, 4.8]
    assert summarize(data, seed=7) == summarize(data, seed=7)
    assert summarize(data, seed=7, n_resamples=2000) == summarize(data, seed=7, n_resamples=2000)


def test_summarize_single_and_empty():
    s = summarize([4.2])
    assert s == Summary(
        n=1, median=4.2, ci_low=4.2, ci_high=4.2, mean=4.2, stdev=0.0, minimum=4.2, maximum=4.2
    )
    with pytest.raises(ValueError):
        summarize([])


def test_relative_spread():
    s = Summary(
        n=5, median=200.0, ci_low=190.0, ci_high=220.0, mean=0, stdev=0, minimum=0, maximum=0
    )
    assert relative_spread(s) == pytest.approx(0.15)
    assert relative_spread(summarize([3.0])) == 0.0


# -------------------------------------------------------------------------- judge


def by_key(j):
    return {v.key: v for v in j.verdicts}


def test_judge_clear_ten_percent_slower_is_worse():
    fast = [100.0, 101.0, 99.0, 100.5, 99.5]
    slow = [110.0, 111.0, 109.0, 110.5, 109.5]
    j = judge({"slow": slow, "fast": fast})
    v = by_key(j)
    assert j.best == "fast"
    assert v["fast"].verdict == "best" and v["fast"].p_raw is None
    assert v["slow"].verdict == "worse"
    assert v["slow"].ratio_to_best == pytest.approx(1.1)
    assert v["slow"].effect == pytest.approx(0.1)
    assert v["slow"].p_adjusted == v["slow"].p_raw < 0.001  # single comparison: Holm is a no-op
    assert j.significant


def test_judge_tiny_effect_is_equivalent_despite_tiny_p():
    base = [100.0, 100.01, 99.99, 100.005, 99.995]
    j = judge({"a": base, "b": [x * 1.01 for x in base]})
    v = by_key(j)["b"]
    assert v.p_adjusted < 1e-6  # statistically unmistakable...
    assert v.effect == pytest.approx(0.01)  # ...but below min_effect=0.03
    assert v.verdict == "equivalent" and v.p_equivalent < 0.05
    assert not j.significant
    # With a lower bar the same data is "worse".
    assert (
        by_key(judge({"a": base, "b": [x * 1.01 for x in base]}, min_effect=0.005))["b"].verdict
        == "worse"
    )


def test_judge_identical_distributions_not_significant():
    rng = np.random.default_rng(123)
    points = {k: list(rng.lognormal(mean=4.6, sigma=0.05, size=5)) for k in "abcd"}
    j = judge(points)
    assert not j.significant
    # Nothing is shown worse: nothing is crowned, and with a 5% spread at n = 5 the points
    # cannot be shown to lie within 3% of each other either.
    assert j.crowned is None and not any(v.verdict == "best" for v in j.verdicts)
    assert all(v.verdict == "inconclusive" for v in j.verdicts)
    assert all(v.extra and v.extra > 0 for v in j.verdicts if v.key != j.best)


def test_judge_failed_points():
    j = judge({"a": [10.0, 10.1, 9.9], "dead": [], "b": [10.0, 10.2, 9.8]})
    dead = by_key(j)["dead"]
    assert dead.verdict == "failed"
    assert (dead.summary, dead.ratio_to_best, dead.effect, dead.p_raw, dead.p_adjusted) == (
        None,
        None,
        None,
        None,
        None,
    )
    assert j.best == "a"
    all_failed = judge({"x": [], "y": []})
    assert all_failed.best is None and not all_failed.significant
    assert [v.verdict for v in all_failed.verdicts] == ["failed", "failed"]


def test_judge_single_live_point_is_best():
    j = judge({"dead": [], "only": [5.0, 5.1]})
    assert j.best == "only"
    assert by_key(j)["only"].verdict == "best"
    assert not j.significant


def test_judge_maximize():
    low = [900.0, 905.0, 895.0, 902.0, 898.0]  # throughput: higher is better
    high = [1000.0, 1005.0, 995.0, 1002.0, 998.0]
    j = judge({"low": low, "high": high}, direction="maximize")
    v = by_key(j)
    assert j.best == "high"
    assert v["low"].ratio_to_best == pytest.approx(0.9)
    assert v["low"].effect == pytest.approx(0.1)  # 1 - 900/1000, positive = worse
    assert v["low"].verdict == "worse"
    # Same data minimized picks the other point.
    assert judge({"low": low, "high": high}).best == "low"


def test_judge_best_choice_ties_and_order():
    points = {"c": [3.0, 3.1, 2.9], "a": [1.0, 1.1, 0.9], "b": [1.0, 1.05, 0.95], "d": [2.0]}
    j = judge(points)
    assert j.best == "a"  # a and b share median 1.0; a comes first
    assert [v.key for v in j.verdicts] == ["c", "a", "b", "d"]
    assert by_key(j)["d"].p_raw == 1.0  # n=1: no evidence
    assert (j.test, j.alpha, j.min_effect) == ("welch-log", 0.05, 0.03)


def test_judge_holm_is_applied_over_all_comparisons():
    rng = np.random.default_rng(1)
    points = {i: list(100 * (1 + 0.05 * i) * rng.lognormal(0, 0.02, size=5)) for i in range(4)}
    j = judge(points)
    others = [v for v in j.verdicts if v.key != j.best]
    assert [v.p_adjusted for v in others] == pytest.approx(holm([v.p_raw for v in others]))


def test_mann_whitney_cannot_reach_significance_at_n5_with_10_points():
    # 10 clearly separated points x 5 samples. Best exact MW p is 2/252; Holm x9 -> 0.071 > 0.05.
    noise = [0.99, 0.995, 1.0, 1.005, 1.01]
    points = {i: [100.0 * (1 + 0.1 * i) * e for e in noise] for i in range(10)}

    mw = judge(points, test="mann-whitney")
    assert mw.best == 0
    assert not mw.significant
    assert all(v.verdict != "worse" for v in mw.verdicts)
    assert min(v.p_raw for v in mw.verdicts if v.p_raw is not None) == pytest.approx(2 / 252)
    assert min(v.p_adjusted for v in mw.verdicts if v.p_adjusted is not None) == pytest.approx(
        9 * 2 / 252
    )

    welch = judge(points)  # default: welch-log
    assert welch.significant
    assert [v.verdict for v in welch.verdicts] == ["best"] + ["worse"] * 9


def test_plain_welch_matches_scipy_and_accepts_zeros():
    a, b = [0.0, 10.0, 12.0, 9.0], [20.0, 22.0, 19.0, 25.0]
    expected = sps.ttest_ind(a, b, equal_var=False).pvalue
    assert p_value(a, b, "welch") == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError):
        p_value(a, b, "welch-log")


def test_center_mean_ranks_by_mean_not_median():
    # Medians say A is best; means say B: throughput is judged on the mean.
    points = {"A": [10.0, 10.0, 1.0], "B": [9.0, 9.0, 9.0]}
    assert judge(points, direction="maximize", center="median").best == "A"
    by_mean = judge(points, direction="maximize", center="mean")
    assert by_mean.best == "B"
    a = next(v for v in by_mean.verdicts if v.key == "A")
    assert a.ratio_to_best == pytest.approx(7.0 / 9.0)


def test_equivalent_points_are_all_the_same_and_nobody_is_crowned():
    rng = np.random.default_rng(7)
    points = {k: list(rng.lognormal(mean=0.0, sigma=0.005, size=8)) for k in "abc"}
    j = judge(points, min_effect=0.03)
    assert j.equivalent and not j.significant and j.crowned is None
    assert [v.verdict for v in j.verdicts] == ["equivalent"] * 3
    assert all(v.p_equivalent < 0.05 for v in j.verdicts if v.key != j.best)


def test_the_leader_is_best_only_when_something_is_shown_worse():
    rng = np.random.default_rng(3)
    fast = list(rng.lognormal(0.0, 0.005, size=8))
    same = list(rng.lognormal(0.0, 0.005, size=8))
    slow = list(rng.lognormal(np.log(1.2), 0.005, size=8))
    noisy = [0.8, 1.3, 1.0, 1.25, 0.85, 1.2, 1.1, 0.9]  # its median is not in front
    v = by_key(judge({"fast": fast, "same": same, "slow": slow, "noisy": noisy}))
    leader = "fast" if v["fast"].p_raw is None else "same"
    assert v[leader].verdict == "best"
    assert v["slow"].verdict == "worse"
    assert v["noisy"].verdict == "inconclusive" and v["noisy"].extra > 0
    other = "same" if leader == "fast" else "fast"
    assert v[other].verdict == "equivalent"


def test_tost_is_two_one_sided_tests_on_the_log_scale():
    base = [1.0, 1.01, 0.99, 1.005, 0.995, 1.0]
    assert p_equivalent([x * 1.10 for x in base], base, 0.03) > 0.5  # 10% off: not within 3%
    assert p_equivalent([x * 1.01 for x in base], base, 0.03) < 0.001
    # Symmetric on the log scale: a factor 1.03 above and 1/1.03 below are alike.
    up = p_equivalent([x * 1.02 for x in base], base, 0.03)
    down = p_equivalent([x / 1.02 for x in base], base, 0.03)
    assert up == pytest.approx(down, rel=1e-6)
    with pytest.raises(ValueError):
        p_equivalent(base, base, 0.0)


def test_extra_rounds_shrink_as_the_answer_nears():
    rng = np.random.default_rng(11)
    base = list(rng.lognormal(0.0, 0.1, size=5))
    near = judge({"a": base, "b": [x * 1.2 for x in rng.lognormal(0.0, 0.1, size=5)]})
    far = judge({"a": base, "b": [x * 1.06 for x in rng.lognormal(0.0, 0.1, size=5)]})
    extras = [by_key(j)["b"].extra for j in (near, far)]
    assert [by_key(j)["b"].verdict for j in (near, far)] == ["inconclusive"] * 2
    assert extras[0] is not None and extras[1] is not None
    assert 0 < extras[0] < extras[1]  # a 20% gap is decided sooner than a 6% one


def test_judge_controls_false_equivalence_at_alpha():
    """Points exactly at the margin (3% apart) are called equivalent in at most α of runs."""
    rng = np.random.default_rng(5)
    called = 0
    runs = 400
    for _ in range(runs):
        a = list(rng.lognormal(0.0, 0.03, size=6))
        b = list(rng.lognormal(np.log(1.0 / 1.03), 0.03, size=6))  # exactly at the margin
        called += any(v.verdict == "equivalent" for v in judge({"a": a, "b": b}).verdicts)
    assert called / runs <= 0.05 + 2 * (0.05 * 0.95 / runs) ** 0.5


# --------------------------------------------------------------------------- sequential


def test_sequential_boundaries_match_published_obrien_fleming_values():
    # Lan-DeMets O'Brien-Fleming spending, 5 equally spaced looks, one-sided α = 0.025:
    # 4.877, 3.357, 2.680, 2.290, 2.031 (Jennison & Turnbull, Group Sequential Methods).
    levels = sequential_levels(0.025, (0.2, 0.4, 0.6, 0.8, 1.0), "obf")
    z = [float(norm.isf(level)) for level in levels]
    assert z == pytest.approx([4.877, 3.357, 2.680, 2.290, 2.031], abs=0.01)
    assert all(b >= a for a, b in zip(z[1:], z, strict=False))  # never easier than later
    # Lan-DeMets Pocock-type spending (the default), the same looks: 2.438, 2.427, 2.410,
    # 2.397, 2.386 (as tabulated by the ldbounds and gsDesign packages).
    pocock = [float(norm.isf(level)) for level in
              sequential_levels(0.025, (0.2, 0.4, 0.6, 0.8, 1.0), "pocock")]
    assert pocock == pytest.approx([2.438, 2.427, 2.410, 2.397, 2.386], abs=0.01)
    assert sequential_levels(0.025, (0.2, 0.4, 0.6, 0.8, 1.0)) == \
        sequential_levels(0.025, (0.2, 0.4, 0.6, 0.8, 1.0), "pocock")
    # One look with all the information is the fixed design.
    assert sequential_levels(0.05, (1.0,)) == pytest.approx((0.05,))
    with pytest.raises(ValueError):
        sequential_levels(0.05, (0.5, 0.4))


def _welch_log_p(a: np.ndarray, b: np.ndarray, shift: float = 0.0,
                 alternative: str = "two-sided") -> np.ndarray:
    """stats.p_value's Welch test on log values, for many simulated runs at once (rows);
    `shift` moves b on the log scale (the TOST bounds)."""
    la, lb = np.log(a), np.log(b) + shift
    n = a.shape[1]
    va, vb = la.var(axis=1, ddof=1) / n, lb.var(axis=1, ddof=1) / n
    t = (la.mean(axis=1) - lb.mean(axis=1)) / np.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (n - 1) + vb ** 2 / (n - 1))
    if alternative == "less":
        return student_t.cdf(t, df)
    if alternative == "greater":
        return student_t.sf(t, df)
    return 2 * student_t.sf(np.abs(t), df)


def _adaptive_runs(rng, runs: int, ratio: float, sigma: float, floor: int, ceiling: int,
                   levels_at) -> tuple[float, float]:
    """Simulated adaptive runs of two points, looking after every round from the floor and
    stopping at the first decision: the share that ever showed a difference, and the share
    that ever showed equivalence (±3%)."""
    a = rng.lognormal(0.0, sigma, (runs, ceiling))
    b = rng.lognormal(np.log(ratio), sigma, (runs, ceiling))
    # The vectorised tests are the library's own, checked on a few runs.
    for i in range(3):
        assert _welch_log_p(a[i:i + 1, :5], b[i:i + 1, :5])[0] == pytest.approx(
            p_value(a[i, :5], b[i, :5]))
        tost = max(_welch_log_p(a[i:i + 1, :5], b[i:i + 1, :5], np.log(1.03), "less")[0],
                   _welch_log_p(a[i:i + 1, :5], b[i:i + 1, :5], -np.log(1.03), "greater")[0])
        assert tost == pytest.approx(p_equivalent(a[i, :5], b[i, :5], 0.03))
    open_ = np.ones(runs, dtype=bool)
    different = np.zeros(runs, dtype=bool)
    same = np.zeros(runs, dtype=bool)
    for n in range(floor, ceiling + 1):
        level = levels_at(n)
        shown = open_ & (_welch_log_p(a[:, :n], b[:, :n]) < level.worse)
        tost = np.maximum(_welch_log_p(a[:, :n], b[:, :n], np.log(1.03), "less"),
                          _welch_log_p(a[:, :n], b[:, :n], -np.log(1.03), "greater"))
        alike = open_ & ~shown & (tost < level.same)
        different |= shown
        same |= alike
        open_ &= ~(shown | alike)
    return float(different.mean()), float(same.mean())


def test_looking_after_every_round_keeps_the_false_positive_rate_at_alpha():
    """A/A: two identical configurations on a noisy machine (20% spread), looked at after
    every round from 3 to 20. With the sequential levels a difference is claimed in α of
    runs; testing at α at every look, as a naive loop would, claims one far more often.

    The boundaries are normal theory applied to Welch t-tests at n = 3–20: over 40,000
    simulated runs they gave 4.69% for α = 5% (Pocock-type spending; 4.93% with the
    O'Brien-Fleming type), hence the allowance here (benchmarks/sequential_error_rates.py)."""
    runs = 20_000
    sequential, _ = _adaptive_runs(np.random.default_rng(2026), runs, 1.0, 0.2, 3, 20,
                                   lambda n: Levels.sequential(0.05, n, 3, 20))
    naive, _ = _adaptive_runs(np.random.default_rng(2026), runs, 1.0, 0.2, 3, 20,
                              lambda n: Levels.fixed(0.05))
    assert 0.04 <= sequential <= 0.055
    assert naive > 0.12  # peeking without a sequential method inflates the error


def test_looking_after_every_round_keeps_false_equivalence_at_alpha():
    """Two configurations exactly 3% apart (the margin): shown "equivalent" in at most α of
    adaptive runs."""
    runs = 20_000
    _, same = _adaptive_runs(np.random.default_rng(7), runs, 1.03, 0.03, 3, 20,
                             lambda n: Levels.sequential(0.05, n, 3, 20))
    assert same <= 0.055


def test_paired_comparisons_by_block_and_near_constant_differences_stay_quiet():
    base = [1.0, 1.5, 1.2, 1.4, 1.1]  # starts at very different levels
    slower = [x * 1.06 for x in base]  # the same 6% on every start, to rounding
    blocks = {"a": list("vwxyz"), "b": list("vwxyz")}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        paired = judge({"a": base, "b": slower}, blocks=blocks)
    assert by_key(paired)["b"].verdict == "worse"
    unpaired = judge({"a": base, "b": slower})
    assert by_key(unpaired)["b"].verdict == "inconclusive"
    # Blocks that the leader lacks: unpaired.
    elsewhere = judge({"a": base, "b": slower}, blocks={"a": list("vwxyz"), "b": list("VWXYZ")})
    assert by_key(elsewhere)["b"].p_raw == by_key(unpaired)["b"].p_raw


def test_two_speed_levels_that_every_point_shares_are_recognised_as_the_machines():
    rng = np.random.default_rng(1)
    # A machine that runs at 0.20 s or at 0.42 s, whatever the value (the values add 0–45%).
    levels = {i: list(np.where(rng.random(5) < 0.5, 0.20, 0.42) * rng.lognormal(0, 0.02, 5)
                      * (1 + 0.05 * i)) for i in range(10)}
    found = speed_levels(levels)
    assert found is not None and 1.9 < found.ratio < 2.3
    assert found.points_with_both >= 5 and found.slow + found.fast == 50
    # Ordinary noise, and a setting that doubles the time, are not levels of the machine.
    for seed in range(5):
        noisy = np.random.default_rng(seed)
        assert speed_levels({i: list(0.2 * noisy.lognormal(0, 0.1, 5) * (1 + 0.05 * i))
                             for i in range(10)}) is None
    assert speed_levels({i: list(0.2 * rng.lognormal(0, 0.02, 5) * (2 if i > 5 else 1))
                         for i in range(10)}) is None
    assert speed_levels({0: [1.0, 2.0]}) is None  # too few to tell


# --------------------------------------------------------------------------- reach


def test_reach_of_few_rounds():
    from knoblab.stats import reach

    two = reach(2, 0.05, "welch")
    assert two.bar == pytest.approx(student_t.ppf(0.975, 1)) and two.too_few
    assert two.equivalent_bar == pytest.approx(student_t.ppf(0.95, 1))
    # The fewest rounds whose bar is within 1.5x of the large-sample one (1.96).
    assert two.enough == 5 and student_t.ppf(0.975, 4) < 1.5 * norm.ppf(0.975)
    assert student_t.ppf(0.975, 3) > 1.5 * norm.ppf(0.975)
    assert not reach(5, 0.05, "welch-log").too_few
    # Signed ranks over paired rounds: the least p of n rounds is 2 / 2^n.
    assert reach(2, 0.05, "mann-whitney").least_p == 0.5
    assert reach(5, 0.05, "mann-whitney").too_few and reach(6, 0.05, "mann-whitney").enough == 6
    # A stricter alpha needs more rounds.
    assert reach(2, 0.01, "welch").enough > 5


def test_two_rounds_cannot_decide_a_large_difference_that_five_can():
    # What the warning claims, by simulation: a 2.6x throughput difference, starts differing
    # by 12% (log sd), compared within rounds as knoblab does. Two rounds mostly leave it
    # undecided; five rounds decide it nearly always.
    rng = np.random.default_rng(3)

    def decided(rounds: int) -> float:
        hits = 0
        for _ in range(400):
            a = 762.0 * np.exp(rng.normal(0, 0.12, rounds))
            b = 1992.0 * np.exp(rng.normal(0, 0.12, rounds))
            blocks = [f"round {i}" for i in range(rounds)]
            verdict = judge({"16M": list(a), "256M": list(b)}, direction="maximize",
                            test="welch", center="mean",
                            blocks={"16M": blocks, "256M": blocks})
            hits += verdict.significant
        return hits / 400

    assert decided(2) < 0.5
    assert decided(5) > 0.95


def test_too_few_fixed_rounds_are_said_before_the_run():
    from knoblab.runner import few_rounds
    from knoblab.spec import parse_spec

    def spec(**workload):
        return parse_spec({"dataset": {"rows": 1000},
                           "workload": {"sql": "SELECT COUNT(*) FROM dt2", **workload},
                           "sweep": {"read_buffer_size": ["64K", "128K"]}})

    (warning,) = few_rounds(spec(repetitions=2))
    assert warning.startswith("repetitions = 2:") and "repetitions = 5 or more" in warning
    assert few_rounds(spec(repetitions=5)) == []
    assert few_rounds(spec(repetitions="auto")) == []  # rounds until decided


# --------------------------------------------------------------------------- distributions
# knoblab computes Student's t and the normal distribution with scipy.special rather than
# importing scipy.stats (0.6 s of a command's start): they must agree with scipy.stats.

FINITE = st.floats(-1e3, 1e3, allow_nan=False)
FREEDOM = st.floats(0.5, 1e4, allow_nan=False)
PROBABILITY = st.floats(1e-12, 1 - 1e-12)


@given(x=FINITE, df=FREEDOM, q=PROBABILITY)
def test_student_t_is_scipy_stats_t(x, df, q):
    from knoblab.stats import StudentT

    assert StudentT.cdf(x, df) == pytest.approx(student_t.cdf(x, df), rel=1e-12, abs=1e-300)
    assert StudentT.sf(x, df) == pytest.approx(student_t.sf(x, df), rel=1e-12, abs=1e-300)
    assert StudentT.ppf(q, df) == pytest.approx(student_t.ppf(q, df), rel=1e-12)
    assert StudentT.isf(q, df) == pytest.approx(student_t.isf(q, df), rel=1e-12)


@given(x=FINITE, q=PROBABILITY, scale=st.floats(0.01, 100))
def test_normal_is_scipy_stats_norm(x, q, scale):
    from knoblab.stats import Normal

    assert Normal.cdf(x) == pytest.approx(norm.cdf(x), rel=1e-12, abs=1e-300)
    assert Normal.sf(x) == pytest.approx(norm.sf(x), rel=1e-12, abs=1e-300)
    assert Normal.ppf(q) == pytest.approx(norm.ppf(q), rel=1e-12)
    assert Normal.isf(q) == pytest.approx(norm.isf(q), rel=1e-12)
    assert Normal.pdf(x, scale=scale) == pytest.approx(norm.pdf(x, scale=scale), rel=1e-12,
                                                       abs=1e-300)
    assert Normal.pdf(np.array([x, -x])).shape == (2,)


SAMPLE = st.lists(st.floats(0.1, 1e3), min_size=2, max_size=12)


@given(a=SAMPLE, b=SAMPLE, alternative=st.sampled_from(["two-sided", "less", "greater"]))
def test_welch_is_scipy_stats_ttest_ind_from_stats(a, b, alternative):
    from knoblab.stats import welch_p

    xa, xb = np.array(a), np.array(b)
    summaries = (xa.mean(), xa.std(ddof=1), xa.size, xb.mean(), xb.std(ddof=1), xb.size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a constant side: scipy's note
        expected = sps.ttest_ind_from_stats(*summaries, equal_var=False,
                                            alternative=alternative).pvalue
    got = welch_p(*summaries, alternative)
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-300, nan_ok=True)


@given(x=SAMPLE, shift=st.floats(-10, 10),
       alternative=st.sampled_from(["two-sided", "less", "greater"]))
def test_the_paired_t_test_is_scipy_stats_ttest_1samp(x, shift, alternative):
    from knoblab.stats import _one_sample

    d = np.array(x)
    if np.ptp(d - shift) <= 1e-9 * max(1.0, abs(float(np.mean(d - shift)))):
        return  # no spread: decided without a test
    expected = sps.ttest_1samp(d - shift, 0.0, alternative=alternative).pvalue
    assert _one_sample(d, "welch-log", shift, alternative) == pytest.approx(expected, rel=1e-9)


def test_ranks_give_ties_their_mean_rank_as_scipy_does():
    from knoblab.evidence import _ranks

    for values in ([3.0, 1.0, 2.0], [1.0, 1.0, 2.0, 5.0, 5.0, 5.0], [7.0] * 4, [2.0, -1.0]):
        assert list(_ranks(tuple(values))) == list(sps.rankdata(values))


@pytest.mark.parametrize("summaries", [(1.0, 0.0, 3, 1.0, 0.0, 3), (1.0, 0.0, 3, 2.0, 0.0, 3),
                                       (1.0, 0.1, 3, 2.0, 0.0, 3), (5, 0, 2, 5, 0, 2)])
def test_welch_of_constant_sides_is_scipys_too_even_from_plain_numbers(summaries):
    from knoblab.stats import welch_p

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = sps.ttest_ind_from_stats(*summaries, equal_var=False).pvalue
        got = welch_p(*summaries)
    assert got == pytest.approx(expected, nan_ok=True)
