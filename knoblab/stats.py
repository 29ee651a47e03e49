"""Statistics for comparing benchmark points: summaries, p-values, Holm correction, verdicts.

Pure functions, no I/O.

Why "welch-log" is the default test: benchmarks are usually run with few repetitions (e.g. 5).
With 5 vs 5 samples the smallest possible exact two-sided Mann-Whitney p is 2/252 ~= 0.0079.
With 10 points there are 9 comparisons against the best, and Holm multiplies the smallest p by 9,
giving ~0.071 > 0.05: Mann-Whitney can then never call anything significant, however clear the
difference. Welch's t-test has power at small n, and it is run on log(values) because effects on
run times are multiplicative (a setting makes a query x% slower, not k ms slower).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from knoblab.judging import Centre, Direction, Spending, Statistics, Test
from knoblab.vocabulary import PointVerdict

__all__ = ["Centre", "Direction", "Spending", "Statistics", "Test"]  # as knoblab.judging's

# ----------------------------------------------------------------------------- distributions
# Student's t and the normal distribution, computed as scipy.stats computes them (the same
# scipy.special functions, tests/test_stats.py holds them to it): importing scipy.stats builds
# all of its hundred distributions, about 0.6 s of a command's start, for these few calls.


def _special() -> Any:
    from scipy import special  # here, not at the top: a command that judges nothing

    return special


class StudentT:
    """The standard t distribution with `df` degrees of freedom (scipy.stats.t's methods)."""

    @staticmethod
    def cdf(x: Any, df: Any) -> Any:
        return _special().stdtr(df, x)

    @staticmethod
    def sf(x: Any, df: Any) -> Any:
        return _special().stdtr(df, -np.asarray(x))

    @staticmethod
    def ppf(q: Any, df: Any) -> Any:
        return _special().stdtrit(df, q)

    @staticmethod
    def isf(q: Any, df: Any) -> Any:
        return -_special().stdtrit(df, q)


class Normal:
    """The normal distribution, centred on 0 (scipy.stats.norm's methods)."""

    @staticmethod
    def cdf(x: Any) -> Any:
        return _special().ndtr(x)

    @staticmethod
    def sf(x: Any) -> Any:
        return _special().ndtr(-np.asarray(x))

    @staticmethod
    def ppf(q: Any) -> Any:
        return _special().ndtri(q)

    @staticmethod
    def isf(q: Any) -> Any:
        return -_special().ndtri(q)

    @staticmethod
    def pdf(x: Any, scale: float = 1.0) -> Any:
        z = np.asarray(x) / scale
        return np.exp(-z ** 2 / 2.0) / math.sqrt(2 * math.pi) / scale


def welch_p(mean_a: float, sd_a: float, n_a: int, mean_b: float, sd_b: float, n_b: int,
            alternative: Literal["two-sided", "less", "greater"] = "two-sided") -> float:
    """Welch's t-test of a against b from their summaries (scipy.stats.ttest_ind_from_stats
    with equal_var=False): the p-value."""
    va, vb = np.float64(sd_a) ** 2 / n_a, np.float64(sd_b) ** 2 / n_b  # 0 / 0: nan, as scipy
    with np.errstate(divide="ignore", invalid="ignore"):
        freedom = (va + vb) ** 2 / (va ** 2 / (n_a - 1) + vb ** 2 / (n_b - 1))
        t = np.divide(mean_a - mean_b, np.sqrt(va + vb))
    return _t_p(t, 1.0 if np.isnan(freedom) else freedom, alternative)


def _t_p(t: Any, freedom: Any, alternative: Literal["two-sided", "less", "greater"]) -> float:
    if alternative == "less":
        return float(StudentT.cdf(t, freedom))
    if alternative == "greater":
        return float(StudentT.sf(t, freedom))
    return float(2 * StudentT.sf(np.abs(t), freedom))


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    ci_low: float  # bootstrap CI of the median
    ci_high: float
    mean: float
    stdev: float  # sample stdev (ddof=1); 0.0 when n == 1
    minimum: float
    maximum: float


def summarize(
    samples: Sequence[float], *, confidence: float = 0.95, n_resamples: int = 10_000, seed: int = 0
) -> Summary:
    """Median with a percentile-bootstrap CI of the median; seeded, so deterministic."""
    x = np.asarray(samples, dtype=float)
    if x.size == 0:
        raise ValueError("summarize() needs at least one sample")
    if not np.all(np.isfinite(x)):
        raise ValueError("samples must be finite")
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must be in (0, 1)")
    if n_resamples < 1:
        raise ValueError("n_resamples must be >= 1")
    n = int(x.size)
    median = float(np.median(x))
    if n == 1:
        lo = hi = median
    else:
        rng = np.random.default_rng(seed)
        boot = np.median(x[rng.integers(0, n, size=(n_resamples, n))], axis=1)
        tail = (1.0 - confidence) / 2.0
        lo, hi = (float(q) for q in np.quantile(boot, [tail, 1.0 - tail]))
        # The percentile CI nearly always brackets the sample median; make it a guarantee.
        lo, hi = min(lo, median), max(hi, median)
    return Summary(
        n=n,
        median=median,
        ci_low=lo,
        ci_high=hi,
        mean=float(np.mean(x)),
        stdev=float(np.std(x, ddof=1)) if n > 1 else 0.0,
        minimum=float(np.min(x)),
        maximum=float(np.max(x)),
    )


def relative_spread(summary: Summary) -> float:
    """Width of the median's CI relative to the median, for "how precise" messages."""
    width = summary.ci_high - summary.ci_low
    if summary.median == 0.0:
        return 0.0 if width == 0.0 else math.inf
    return width / abs(summary.median)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in input order, step-down monotone, capped at 1."""
    ps = [float(p) for p in p_values]
    if any(not 0.0 <= p <= 1.0 for p in ps):  # also rejects nan
        raise ValueError("p-values must be in [0, 1]")
    m = len(ps)
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda k: ps[k])):
        # The k-th smallest p is multiplied by (m - k); the running max keeps the order.
        running = max(running, min(1.0, (m - rank) * ps[i]))
        adjusted[i] = running
    return adjusted


def p_value(
    a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, test: Test = "welch-log"
) -> float:
    """Two-sided p-value for "a and b differ". Never nan: degenerate inputs give 0.0 or 1.0."""
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if test in ("welch-log", "welch"):
        # "welch" is for values that can be 0 or whose effects add up, such as batch means of
        # throughput; "welch-log" for times, whose effects multiply.
        if test == "welch-log" and (np.any(xa <= 0) or np.any(xb <= 0)):
            raise ValueError("welch-log needs strictly positive values")
        if xa.size < 2 or xb.size < 2:
            return 1.0  # no variance estimate: no evidence
        la, lb = (np.log(xa), np.log(xb)) if test == "welch-log" else (xa, xb)
        if la.min() == la.max() and lb.min() == lb.max():
            # Both constant: t is 0/0 (equal) or x/0 (different).
            return 0.0 if la[0] != lb[0] else 1.0
        # From summary stats: ttest_ind warns spuriously when just one group is constant.
        return welch_p(la.mean(), la.std(ddof=1), la.size, lb.mean(), lb.std(ddof=1), lb.size)
    if test == "mann-whitney":
        if xa.size < 2 or xb.size < 2:
            return 1.0
        both = np.concatenate([xa, xb])
        if both.min() == both.max():
            return 1.0  # all values equal: rank statistic has zero variance
        no_ties = np.unique(both).size == both.size
        method = "exact" if no_ties and xa.size <= 8 and xb.size <= 8 else "asymptotic"
        from scipy import stats as sps  # here: rank tests only (see StudentT)

        return float(sps.mannwhitneyu(xa, xb, alternative="two-sided", method=method).pvalue)
    raise ValueError(f"unknown test: {test!r}")


def p_one_sided(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray,
                test: Test, alternative: Literal["less", "greater"]) -> float:
    """One-sided p-value for "a is less (greater) than b". Never nan."""
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if xa.size < 2 or xb.size < 2:
        return 1.0
    if test == "mann-whitney":
        if np.concatenate([xa, xb]).min() == np.concatenate([xa, xb]).max():
            return 1.0
        from scipy import stats as sps  # here: rank tests only (see StudentT)

        return float(sps.mannwhitneyu(xa, xb, alternative=alternative).pvalue)
    la, lb = (np.log(xa), np.log(xb)) if test == "welch-log" else (xa, xb)
    if la.min() == la.max() and lb.min() == lb.max():
        holds = la[0] < lb[0] if alternative == "less" else la[0] > lb[0]
        return 0.0 if holds else 1.0
    return welch_p(la.mean(), la.std(ddof=1), la.size, lb.mean(), lb.std(ddof=1), lb.size,
                   alternative)


def p_equivalent(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray,
                 margin: float, test: Test = "welch-log") -> float:
    """p-value for "a lies within a factor 1 ± margin of b", by two one-sided tests (TOST):
    a below b × (1 + margin) and above b / (1 + margin); the larger of the two p-values.
    The bounds are symmetric on the log scale, where effects on times multiply."""
    xb = np.asarray(b, dtype=float)
    if margin <= 0.0:
        raise ValueError("margin must be positive")
    below = p_one_sided(a, xb * (1.0 + margin), test, "less")
    above = p_one_sided(a, xb / (1.0 + margin), test, "greater")
    return max(below, above)


@dataclass(frozen=True)
class Levels:
    """The p-values a comparison must get below to be decided at this look: alpha itself in
    a fixed design; less at each look of a sequential one (see sequential_levels)."""

    worse: float  # the two-sided test of a difference
    same: float  # the equivalence test (TOST, one-sided twice)

    @classmethod
    def fixed(cls, alpha: float) -> Levels:
        return cls(alpha, alpha)

    @classmethod
    def sequential(cls, alpha: float, rounds: int, floor: int, ceiling: int,
                   spending: Spending = "pocock") -> Levels:
        """At the look after `rounds` rounds, when looks were taken after every round from
        `floor` on and at most `ceiling` rounds were ever possible."""
        if rounds < floor:
            raise ValueError("no look is taken before the floor")
        # A look's boundary depends only on the looks before it: the whole schedule is
        # computed once (and cached), and this look's entry taken from it.
        fractions = tuple(r / ceiling for r in range(floor, ceiling + 1))
        look = min(rounds, ceiling) - floor
        return cls(2.0 * sequential_levels(alpha / 2.0, fractions, spending)[look],
                   sequential_levels(alpha, fractions, spending)[look])


@dataclass(frozen=True)
class Verdict:
    key: Hashable
    summary: Summary | None  # None when failed
    # best: the leader, when at least one point is shown worse than it;
    # equivalent: shown within ±min_effect of the leader; worse: shown different from it, by at
    # least min_effect; inconclusive: neither (more measurements could decide it); the leader
    # itself is "equivalent" or "inconclusive" when nothing is shown worse: nothing is crowned.
    verdict: PointVerdict
    ratio_to_best: float | None  # centre / the leader's centre (None for failed)
    effect: float | None  # relative change against the leader, positive = worse
    p_raw: float | None  # None for the leader and failed points
    p_adjusted: float | None  # Holm over all comparisons against the leader
    p_equivalent: float | None = None  # TOST, Holm over the same comparisons
    extra: int | None = None  # inconclusive: about how many more samples each would decide it


@dataclass(frozen=True)
class Judgement:
    best: Hashable | None  # the leader; None when every point failed
    verdicts: list[Verdict]  # same order as the input mapping
    significant: bool  # True iff at least one point is "worse"
    test: str
    alpha: float
    min_effect: float
    levels: Levels | None = None  # what decided it, when not alpha itself (sequential looks)

    @property
    def equivalent(self) -> bool:
        """Every point that did not fail was shown to be within ±min_effect of the leader."""
        alive = [v for v in self.verdicts if v.verdict != PointVerdict.FAILED]
        return len(alive) > 1 and all(v.verdict == PointVerdict.EQUIVALENT for v in alive)

    @property
    def crowned(self) -> Hashable | None:
        """The leader, but only when something was shown worse than it."""
        return self.best if self.significant else None


def _ratio(median: float, best: float) -> float:
    if best == 0.0:
        return 1.0 if median == 0.0 else math.copysign(math.inf, median)
    return median / best


def judge(
    points: Mapping[Hashable, Sequence[float]],
    *,
    direction: Direction = "minimize",
    min_effect: float = 0.03,
    alpha: float = 0.05,
    test: Test = "welch-log",
    confidence: float = 0.95,
    seed: int = 0,
    center: Centre = "median",
    levels: Levels | None = None,
    blocks: Mapping[Hashable, Sequence[Hashable]] | None = None,
) -> Judgement:
    """Find the leader and say of each other point whether it is worse than it (significantly
    and by at least min_effect), equivalent to it (within ±min_effect, shown by TOST), or
    neither yet.

    `center` is what the leader and the effect sizes are measured on: the median for times,
    the mean for throughput (a mean of per-start means is what the Welch test compares).
    `levels`: what the tests must reach at this look of a sequential design (default: alpha).
    `blocks`: for each point, the block of each of its samples (the server start, or the
    round, it was measured in). A point is then compared with the leader on the ratios of
    their samples in the same blocks (paired tests), so that what a block shares — a
    start's level, a minute of a slow machine — cancels out; unpaired when fewer than two
    blocks hold both.
    """
    if direction not in ("minimize", "maximize"):
        raise ValueError(f"unknown direction: {direction!r}")
    reach = levels or Levels.fixed(alpha)
    summaries = {
        k: summarize(v, confidence=confidence, seed=seed) if len(v) else None
        for k, v in points.items()
    }
    alive = [k for k, s in summaries.items() if s is not None]
    if not alive:
        verdicts = [Verdict(k, None, PointVerdict.FAILED, None, None, None, None) for k in points]
        return Judgement(None, verdicts, False, test, alpha, min_effect, levels)

    sign = 1.0 if direction == "minimize" else -1.0
    def level(key: Hashable) -> float:
        return getattr(summaries[key], center)

    best = min(alive, key=lambda k: sign * level(k))  # min() keeps the first on ties
    others = [k for k in alive if k != best]
    pairs = {k: _paired(points, blocks, k, best, test) for k in others}
    p_raw, p_adj, p_same = _p_values(points, pairs, best, min_effect, test)

    compared: dict[Hashable, Verdict] = {}
    for key in others:
        ratio = _ratio(level(key), level(best))
        effect = ratio - 1.0 if direction == "minimize" else 1.0 - ratio
        if p_adj[key] < reach.worse and effect >= min_effect:
            label = PointVerdict.WORSE
        elif p_same[key] < reach.same:
            label = PointVerdict.EQUIVALENT
        else:
            label = PointVerdict.INCONCLUSIVE
        extra = None if label != PointVerdict.INCONCLUSIVE else \
            _extra_samples(points[key], points[best], min_effect, reach.worse, len(others), test,
                           pairs[key])
        compared[key] = Verdict(key, summaries[key], label, ratio, effect, p_raw[key],
                                p_adj[key], p_same[key], extra)
    significant = any(v.verdict == PointVerdict.WORSE for v in compared.values())
    if significant or not others:
        leader = PointVerdict.BEST
    elif all(v.verdict == PointVerdict.EQUIVALENT for v in compared.values()):
        leader = PointVerdict.EQUIVALENT
    else:
        leader = PointVerdict.INCONCLUSIVE
    verdicts = []
    for key, s in summaries.items():
        if s is None:
            verdicts.append(Verdict(key, None, PointVerdict.FAILED, None, None, None, None))
        elif key == best:
            verdicts.append(Verdict(key, s, leader, 1.0, 0.0, None, None))
        else:
            verdicts.append(compared[key])
    return Judgement(best, verdicts, significant, test, alpha, min_effect, levels)


def _p_values(points: Mapping[Hashable, Sequence[float]],
              pairs: Mapping[Hashable, np.ndarray | None], best: Hashable, min_effect: float,
              test: Test) -> tuple[dict[Hashable, float], dict[Hashable, float],
                                   dict[Hashable, float]]:
    """Each other point against the leader: its p-value of differing (paired where `pairs`
    holds its ratios), Holm's adjustment of those, and its p-value of being equivalent,
    adjusted alike."""
    p_raw: dict[Hashable, float] = {}
    p_alike = []
    for k, d in pairs.items():
        if d is None:
            p_raw[k] = p_value(points[k], points[best], test)
            p_alike.append(p_equivalent(points[k], points[best], min_effect, test))
        else:
            p_raw[k] = _p_paired(d, test)
            p_alike.append(_p_paired_equivalent(d, min_effect, test))
    p_adj = dict(zip(pairs, holm([p_raw[k] for k in pairs]), strict=True))
    return p_raw, p_adj, dict(zip(pairs, holm(p_alike), strict=True))


def _paired(points: Mapping[Hashable, Sequence[float]],
            blocks: Mapping[Hashable, Sequence[Hashable]] | None, key: Hashable,
            best: Hashable, test: Test) -> np.ndarray | None:
    """The differences of `key` from the leader within the blocks both were measured in, on
    the scale the test works on (log ratios for times, relative differences for throughput);
    None when fewer than two blocks hold both (then the comparison is unpaired)."""
    if blocks is None or key not in blocks or best not in blocks:
        return None
    mine = dict(zip(blocks[key], points[key], strict=True))
    theirs = dict(zip(blocks[best], points[best], strict=True))
    shared = [b for b in mine if b in theirs]
    if len(shared) < 2:
        return None
    a = np.asarray([mine[b] for b in shared], dtype=float)
    b = np.asarray([theirs[b] for b in shared], dtype=float)
    if test == "welch":
        scale = float(np.mean(np.abs(b))) or 1.0
        return (a - b) / scale
    if np.any(a <= 0) or np.any(b <= 0):
        return None
    return np.log(a) - np.log(b)


def _one_sample(d: np.ndarray, test: Test, shift: float,
                alternative: Literal["two-sided", "less", "greater"]) -> float:
    """p for the differences' centre against `shift`: a t-test, or Wilcoxon's signed-rank
    test for "mann-whitney". Never nan."""
    x = d - shift
    centre = float(np.mean(x))
    # No spread (to rounding): the answer is certain either way, and scipy would warn.
    if float(np.ptp(x)) <= 1e-9 * max(1.0, abs(centre)):
        holds = {"two-sided": centre != 0, "less": centre < 0, "greater": centre > 0}
        return 0.0 if holds[alternative] else 1.0
    if test == "mann-whitney":
        from scipy import stats as sps  # here: rank tests only (see StudentT)

        with warnings.catch_warnings():  # precision notes on near-constant data
            warnings.simplefilter("ignore", RuntimeWarning)
            return float(sps.wilcoxon(x, alternative=alternative).pvalue)
    # The one-sample t-test, as scipy.stats.ttest_1samp: the variance as the mean squared
    # deviation, scaled by n / (n - 1).
    n = x.size
    variance = float(np.mean((x - centre) ** 2)) * (n / (n - 1))
    return _t_p(centre / math.sqrt(variance / n), n - 1, alternative)


def _p_paired(d: np.ndarray, test: Test) -> float:
    return _one_sample(d, test, 0.0, "two-sided")


def _p_paired_equivalent(d: np.ndarray, margin: float, test: Test) -> float:
    bound = margin if test == "welch" else math.log1p(margin)
    return max(_one_sample(d, test, bound, "less"), _one_sample(d, test, -bound, "greater"))


def _extra_samples(a: Sequence[float], b: Sequence[float], min_effect: float, alpha: float,
                   comparisons: int, test: Test, paired: np.ndarray | None = None) -> int | None:
    """Roughly how many more samples of each point would decide an inconclusive comparison,
    if its difference and spread stayed as measured: the standard error shrinks with the
    square root of n until the interval clears the nearer decision (worse, or equivalent).
    None when the measurements give no spread to extrapolate from."""
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if paired is not None:
        n = paired.size
        se = float(paired.std(ddof=1)) / math.sqrt(n)
        difference = abs(float(paired.mean()))
    else:
        if xa.size < 2 or xb.size < 2 or np.any(xa <= 0) or np.any(xb <= 0):
            return None
        la, lb = (np.log(xa), np.log(xb)) if test != "welch" else \
            (xa / xb.mean(), xb / xb.mean())
        n = min(xa.size, xb.size)
        se = math.sqrt(la.var(ddof=1) / la.size + lb.var(ddof=1) / lb.size)
        difference = abs(float(la.mean() - lb.mean()))
    if se == 0.0:
        return None
    bound = math.log1p(min_effect) if test != "welch" else min_effect
    z = float(Normal.ppf(1.0 - alpha / comparisons / 2))
    # Worse needs |d| / se' > z; equivalent needs (bound - |d|) / se' > z (one-sided).
    margins = [m for m in (difference if difference >= bound else 0.0,
                           bound - difference) if m > 0.0]
    if not margins:
        return None
    factor = (z * se / max(margins)) ** 2  # se' = se / sqrt(factor) decides it
    return max(1, math.ceil(n * (factor - 1.0)))


# ----------------------------------------------------------------------------- what n can decide


_ENOUGH = 1.5  # a t bar within 1.5x of the large-sample one: the spread is estimated well enough


@dataclass(frozen=True)
class Reach:
    """What a fixed number of rounds can decide at the very best (one comparison, no Holm).

    Points are compared within rounds (paired), so n rounds leave n - 1 degrees of freedom for
    the spread between server starts. That spread is the noise that matters (docs/benchmarks.md:
    start-to-start variance dominates), and only more starts estimate it: the seconds or batch
    means of one start share its level, so counting them as samples is the pseudo-replication
    the README warns of. Hence an answer from 2 rounds is a t-test with 1 degree of freedom,
    and what can be said up front is how high that bar is and how many rounds lower it."""

    repetitions: int
    bar: float | None  # t-tests: |difference| / standard error must exceed this to be "worse"
    equivalent_bar: float | None  # ... and the margin's distance for "equivalent" (TOST)
    least_p: float | None  # rank tests: the smallest p-value n rounds can give
    enough: int  # the fewest rounds whose bar is within 1.5x of the large-sample one (t-tests),
    # or whose least p is below alpha (rank tests)
    enough_bar: float | None = None  # the bar with `enough` rounds (t-tests)

    @property
    def too_few(self) -> bool:
        return self.repetitions < self.enough

    @property
    def hopeless(self) -> bool:
        """Too few to decide even a large difference, most of the time: one round, a rank
        test that cannot reach alpha, or a bar more than twice that of `enough` rounds (2
        rounds at alpha = 0.05: 12.7 against 2.8)."""
        if self.bar is None or self.enough_bar is None:
            return self.too_few
        return self.bar > 2 * self.enough_bar


def reach(repetitions: int, alpha: float, test: Test) -> Reach:
    """The bar a comparison of `repetitions` rounds must clear with `test` at `alpha`."""
    n = max(1, repetitions)
    if test == "mann-whitney":
        # Wilcoxon's signed-rank test on n paired rounds: the smallest exact two-sided p is
        # 2 / 2^n (every difference of one sign), 0.5 with 2 rounds.
        enough = 1 + math.ceil(math.log2(1.0 / alpha))
        least = min(1.0, 2.0 / 2 ** n) if n > 1 else 1.0
        return Reach(repetitions, None, None, least, enough)
    z = float(Normal.ppf(1 - alpha / 2))
    enough = 2
    while float(StudentT.ppf(1 - alpha / 2, enough - 1)) > _ENOUGH * z:
        enough += 1
    enough_bar = float(StudentT.ppf(1 - alpha / 2, enough - 1))
    if n < 2:
        return Reach(repetitions, None, None, 1.0, enough, enough_bar)
    return Reach(repetitions, float(StudentT.ppf(1 - alpha / 2, n - 1)),
                 float(StudentT.ppf(1 - alpha, n - 1)), None, enough, enough_bar)


@dataclass(frozen=True)
class Change:
    """`b` against `a`: the ratio of their centres, its interval, and the test's p-value."""

    ratio: float
    ci_low: float
    ci_high: float
    p_raw: float


def compare(a: Sequence[float], b: Sequence[float], *, test: Test = "welch-log",
            center: Centre = "median", confidence: float = 0.95,
            n_resamples: int = 4000, seed: int = 0) -> Change:
    """How b differs from a, as center(b) / center(a) with a bootstrap interval.

    Each sample is resampled on its own (they come from different server starts); with one
    value on a side that side has no spread to resample and the interval narrows accordingly.
    """
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if xa.size == 0 or xb.size == 0:
        raise ValueError("both samples need at least one value")
    middle = np.median if center == "median" else np.mean
    ratio = _ratio(float(middle(xb)), float(middle(xa)))
    rng = np.random.default_rng(seed)
    ca = middle(rng.choice(xa, size=(n_resamples, xa.size)), axis=1)
    cb = middle(rng.choice(xb, size=(n_resamples, xb.size)), axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = cb / ca
    ratios = ratios[np.isfinite(ratios)]
    tail = (1 - confidence) / 2 * 100
    low, high = (np.percentile(ratios, [tail, 100 - tail]) if ratios.size else (ratio, ratio))
    return Change(ratio, float(low), float(high), p_value(xa, xb, test))


def welch(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray,
          confidence: float) -> tuple[float, float, float, float]:
    """Welch's t on b against a, on the values given (log times for ratios of geometric
    means): the difference of means, its `confidence` interval and the two-sided p-value.
    Both samples need two values."""
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    va, vb = float(xa.var(ddof=1)) / xa.size, float(xb.var(ddof=1)) / xb.size
    difference, se = float(xb.mean() - xa.mean()), math.sqrt(va + vb)
    if se == 0.0:
        return difference, difference, difference, 1.0 if difference == 0 else 0.0
    freedom = (va + vb) ** 2 / (va ** 2 / (xa.size - 1) + vb ** 2 / (xb.size - 1))
    reach = float(StudentT.ppf(0.5 + confidence / 2, freedom)) * se
    p = float(2 * StudentT.sf(abs(difference) / se, freedom))
    return difference, difference - reach, difference + reach, p


# ----------------------------------------------------------------------------- sequential


_NEVER = 8.0  # a z this high is never crossed (p ~ 6e-16): a look that spends nothing
_GRID = 801  # points of the density grid: boundaries within 0.01 of exact, on the safe side


@functools.lru_cache(maxsize=64)
def sequential_levels(alpha: float, fractions: tuple[float, ...],
                      spending: Spending = "pocock") -> tuple[float, ...]:
    """Nominal one-sided levels for repeated looks at accumulating data, such that the chance
    of crossing at any look, when nothing differs, is `alpha` in all (group-sequential design).

    `fractions` are the information fractions of the looks so far (n / the most n could
    become), increasing, in (0, 1]. The alpha spent by the look at fraction t follows a
    Lan-DeMets spending function:
    - "pocock": α ln(1 + (e - 1) t), about the same level at every look: a clear difference
      is decided at the first looks (what measuring until decided is for), at the price of a
      stricter last look;
    - "obf" (O'Brien-Fleming type): 2 - 2 Φ(z(1 - α/2) / √t), almost nothing early and
      nearly α at the end (the runs made before "pocock" was the default were judged so).
    Each look's boundary is found by
    numerical integration of the score statistic's density over the region where no earlier
    look stopped (Armitage, McPherson and Rowe's recursion), so looks that were not planned
    in advance (a budget running out) keep the error rate.
    """
    from scipy import optimize
    t = np.asarray(fractions, dtype=float)
    if t.size == 0:
        return ()
    if np.any(t <= 0) or np.any(t > 1) or np.any(np.diff(t) <= 0):
        raise ValueError("fractions must increase within (0, 1]")
    z_half = float(Normal.ppf(1.0 - alpha / 2.0))
    if spending == "pocock":
        spent = alpha * np.log1p((math.e - 1.0) * t)
    elif spending == "obf":
        spent = 2.0 - 2.0 * Normal.cdf(z_half / np.sqrt(t))
    else:
        raise ValueError(f"unknown spending function: {spending!r}")
    spend = np.diff(np.concatenate([[0.0], spent]))

    levels: list[float] = []
    grid = np.empty(0)  # values of the score statistic S_k = Z_k √t_k below the boundary
    density = np.empty(0)
    previous = 0.0
    for k, (fraction, amount) in enumerate(zip(t, spend, strict=True)):
        step = fraction - previous
        if k == 0:
            bound = min(float(Normal.isf(amount)), _NEVER) * math.sqrt(fraction)
            grid = np.linspace(-8.0 * math.sqrt(fraction), bound, _GRID)
            density = Normal.pdf(grid, scale=math.sqrt(fraction))
        else:
            weights = density * np.gradient(grid)  # trapezoid-like weights on the grid
            high = _NEVER * math.sqrt(fraction)
            if _crossing(high, grid, weights, step) >= amount:
                bound = high  # spends (next to) nothing: a boundary never crossed
            else:
                bound = float(optimize.brentq(
                    lambda b, g=grid, w=weights, s=step, a=amount: _crossing(b, g, w, s) - a,
                    grid[0], high, xtol=1e-10))
            new_grid = np.linspace(-8.0 * math.sqrt(fraction), bound, _GRID)
            kernel = Normal.pdf((new_grid[:, None] - grid[None, :]) / math.sqrt(step))
            density = kernel @ weights / math.sqrt(step)
            grid = new_grid
        levels.append(float(Normal.sf(bound / math.sqrt(fraction))))
        previous = fraction
    return tuple(levels)


def _crossing(bound: float, grid: np.ndarray, weights: np.ndarray, step: float) -> float:
    """The chance that the score statistic, from the grid's (sub-)density, crosses `bound`
    after an increment of information `step`."""
    return float(np.sum(weights * Normal.sf((bound - grid) / math.sqrt(step))))


# ----------------------------------------------------------------------------- speed levels


@dataclass(frozen=True)
class SpeedLevels:
    """Two levels the measurements fall into, whatever the point: the machine's, not the
    setting's (a noisy neighbour, a CPU that changes speed)."""

    ratio: float  # the slower level's centre over the faster's
    slow: int  # measurements at the slower level
    fast: int
    points_with_both: int  # points measured at both levels
    points: int  # points with at least two measurements


def speed_levels(samples: Mapping[Any, Sequence[float]], *, least_ratio: float = 1.15,
                 separation: float = 5.0) -> SpeedLevels | None:
    """Whether the measurements fall into two distinct speed levels that most points share.

    Each measurement is taken relative to its own point's fastest (log scale), so a setting's
    effect is removed; the pooled deviations are split where the two groups are farthest apart
    for their spread. Two levels: at least `least_ratio` apart, `separation` within-group
    standard deviations apart, each with at least 15% of the measurements, and both seen in at
    least half of the points. None otherwise (or with too few measurements to tell).
    In simulation: two levels 2.1× apart in 10 values × 5 are found in 98% of runs; log-normal
    noise of 10% is taken for levels in at most 0.3% (8 values × 3, 10 × 5, 3 × 20)."""
    deviations: list[tuple[float, Hashable]] = []
    measured = 0
    for key, values in samples.items():
        x = np.asarray([v for v in values if v > 0], dtype=float)
        if x.size < 2:
            continue
        measured += 1
        logs = np.log(x)
        # From the point's fastest: a level the machine falls to shows as a step up, whether
        # most of the point's measurements were fast or slow.
        # The fastest itself (0 by construction) is left out: it would be a cluster of its own.
        deviations += [(float(d), key) for d in np.sort(logs - logs.min())[1:]]
    n = len(deviations)
    if n < 10 or measured < 2:
        return None
    deviations.sort(key=lambda item: item[0])
    ordered = np.asarray([d for d, _ in deviations])
    least = max(3, math.ceil(0.15 * n))
    best: tuple[float, int] | None = None
    for split in range(least, n - least + 1):
        low, high = ordered[:split], ordered[split:]
        within = math.sqrt((low.var(ddof=1) * (low.size - 1) + high.var(ddof=1) *
                            (high.size - 1)) / (n - 2))
        gap = float(high.mean() - low.mean())
        score = gap / within if within > 0 else math.inf
        if best is None or score > best[0]:
            best = (score, split)
    if best is None or best[0] < separation:
        return None
    split = best[1]
    low, high = ordered[:split], ordered[split:]
    ratio = math.exp(float(high.mean() - low.mean()))
    if ratio < least_ratio:
        return None
    slow_keys = {key for _, key in deviations[split:]}
    fast_keys = {key for _, key in deviations[:split]}
    both = len(slow_keys & fast_keys)
    if both * 2 < measured:
        return None
    # Each point's fastest, left out above, is at the faster level.
    return SpeedLevels(ratio, n - split, split + measured, both, measured)


DRIFT_FROM = 8
DRIFT_MOST = 0.6


def drifting_mean_interval(values: Sequence[float], confidence: float = 0.95
                           ) -> tuple[float, float]:
    """The mean of `values` taken one after another (a candidate's per-start ratios, in the
    order measured) and the half-width of its t-interval, widened for drift: where
    neighbours are alike (positive lag-1 autocorrelation r, the machine's slow swings
    between minutes reaching several starts alike), the standard error grows by
    sqrt((1 + r) / (1 - r)), as for a first-order autoregressive series; never narrowed.
    By simulation (tests/test_tune_claims.py): at a correlation of 0.5 and 20 values, 95%
    intervals held the mean 75% of the time without this and 83% with it, at a cost of 2-7%
    in width when there is no drift. Below DRIFT_FROM values r is not estimated (its error is
    about 1/sqrt(n): on a validation's few rounds, one slow round reads as a strong drift, and
    a 4.4-fold gain's interval reached past zero), and r is taken at most DRIFT_MOST, a
    widening of at most twice."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    mean = float(x.mean())
    if n < 2:
        return mean, math.inf
    d = x - mean
    spread = float(d @ d)
    r = float(d[1:] @ d[:-1]) / spread if n >= DRIFT_FROM and spread > 0 else 0.0
    r = min(max(r, 0.0), DRIFT_MOST)
    error = float(x.std(ddof=1)) / math.sqrt(n) * math.sqrt((1 + r) / (1 - r))
    return mean, float(StudentT.ppf(0.5 + confidence / 2, n - 1)) * error
