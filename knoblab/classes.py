"""Statement classes compared between configurations: which got faster, which slower, how
sure that is, and which returned different rows.

A workload that keeps per-class figures in each measurement's details (`details["classes"]`:
a replayed log's fingerprints) gets pt-upgrade's question answered with statistics: for each
class, its time per measurement under each configuration against the reference (the server's
defaults when measured, else the best configuration), as the ratio of geometric means with
a Welch interval on the log scale, simultaneous over every class and configuration shown
(Bonferroni): a class is called faster or slower exactly when its interval leaves out 1, so
the verdict and the interval never disagree, with 95% confidence for the table as a whole
(few measurements give wide intervals, as they should). A class whose
result checksum is the same in every measurement of a configuration, and another in every
measurement of the reference, returned different rows: the setting changed results, which is
not a speed-up. A checksum that varies between measurements of one configuration (concurrent
writes, RAND(), the clock) says nothing either way and is not flagged, and neither does a
configuration measured once: one checksum cannot show that its rows are stable.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from knoblab.codec import Record
from knoblab.vocabulary import ClassVerdict

SHOWN = 10  # classes in the table, by their share of the reference's statement time


@dataclass(frozen=True)
class ClassChange:
    """One class under one configuration against the reference."""

    point: int  # index of the configuration
    ratio: float | None  # its geometric mean time / the reference's; None: not measured twice
    # the ratio's interval, low end: at 1 - alpha for the whole table (Bonferroni); None: as ratio
    ci_low: float | None
    ci_high: float | None  # its high end; None: as ratio
    p_adjusted: float | None  # Bonferroni, over every class and configuration shown
    verdict: ClassVerdict  # faster: the interval below 1; slower: above 1
    rows_differ: bool  # stable checksums that differ from the reference's
    # The configuration by its settings, as the results name it everywhere else (`point` is
    # its position among them); empty in results stored before it was kept.
    settings: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ClassRow:
    id: str  # 16 hex digits: a hash of its fingerprint
    fingerprint: str  # its statements with their literals as ?: never a value
    count: int  # statements per measurement
    share: float  # of the reference's statement time
    # Median per measurement, at the reference, of its statements' times added up over every
    # session (session-seconds): sessions replayed side by side can add up past the wall time.
    seconds: float
    p95: float | None  # median of the measurements' p95, at the reference
    errors: float  # median per measurement, at the reference
    changes: list[ClassChange]  # the class under each other configuration, against the reference


@dataclass(frozen=True)
class ClassComparison(Record):
    reference: int  # index of the reference configuration
    rows: list[ClassRow]  # the classes shown, most of the reference's statement time first
    hidden: int  # classes not shown
    unstable: int  # classes whose rows varied between measurements of one configuration
    reference_settings: dict[str, str] = field(default_factory=dict)  # the reference's


def compare_classes(trials: Mapping[int, Sequence[Any]], reference: int,
                    fingerprints: Mapping[str, str], alpha: float = 0.05,
                    shown: int = SHOWN,
                    settings: Mapping[int, Mapping[str, str]] | None = None
                    ) -> ClassComparison | None:
    """`trials`: each configuration's finished measurements (objects with `.details`), and
    `settings` what each one is; None when they hold no per-class figures or the reference
    has none."""
    def named(point: int) -> dict[str, str]:
        return dict((settings or {}).get(point) or {})

    figures = {point: [t.details["classes"] for t in done if t.details.get("classes")]
               for point, done in trials.items()}
    base = figures.get(reference) or []
    if not base:
        return None
    totals = {cid: float(statistics.median([m.get(cid, {}).get("seconds", 0.0) for m in base]))
              for cid in {cid for m in base for cid in m}}
    whole = sum(totals.values()) or 1.0
    ranked = sorted(totals, key=lambda cid: -totals[cid])
    chosen = ranked[:shown]
    others = [p for p in sorted(figures) if p != reference and figures[p]]
    pairs = [(cid, point) for cid in chosen for point in others]
    changes: dict[str, list[ClassChange]] = {cid: [] for cid in chosen}
    for cid, point in pairs:
        a = [m[cid]["seconds"] for m in base if cid in m]
        b = [m[cid]["seconds"] for m in figures[point] if cid in m]
        differ = _rows_differ(base, figures[point], cid)
        if len(a) < 2 or len(b) < 2 or min(a + b) <= 0:
            changes[cid].append(ClassChange(point, None, None, None, None,
                                            ClassVerdict.NOT_MEASURED, differ, named(point)))
            continue
        ratio, low, high, p = _welch_log(a, b, alpha / len(pairs))
        p = min(1.0, p * len(pairs))
        verdict = ClassVerdict.FASTER if high < 1 else ClassVerdict.SLOWER if low > 1 else \
            ClassVerdict.NO_DIFFERENCE
        changes[cid].append(ClassChange(point, ratio, low, high, p, verdict, differ,
                                        named(point)))
    rows = [ClassRow(
        id=cid, fingerprint=fingerprints.get(cid, cid),
        count=int(statistics.median([m.get(cid, {}).get("n", 0) for m in base])),
        share=totals[cid] / whole, seconds=totals[cid],
        p95=_median([m[cid]["p95"] for m in base if cid in m and m[cid].get("p95") is not None]),
        errors=float(statistics.median([sum(m.get(cid, {}).get("errors", {}).values())
                                        for m in base])),
        changes=changes[cid]) for cid in chosen]
    unstable = sum(1 for cid in totals
                   if any(len(_checksums(figures[p], cid)) > 1 for p in figures))
    return ClassComparison(reference, rows, len(ranked) - len(chosen), unstable,
                           named(reference))


def _welch_log(a: list[float], b: list[float], alpha: float
               ) -> tuple[float, float, float, float]:
    """b against a on the log scale: the ratio of geometric means, its (1 - alpha) interval
    and the two-sided p-value of Welch's test."""
    from knoblab.stats import welch  # here: a record that is only read needs no numpy

    difference, low, high, p = welch([math.log(x) for x in a], [math.log(x) for x in b],
                                     1 - alpha)
    return math.exp(difference), math.exp(low), math.exp(high), p


def _checksums(measurements: list[Mapping[str, Any]], cid: str) -> set[str]:
    return {m[cid].get("checksum") for m in measurements if cid in m}


def _rows_differ(base: list[Mapping[str, Any]], other: list[Mapping[str, Any]],
                 cid: str) -> bool:
    """Stable rows on both sides, and other rows: stability needs two measurements a side
    (concurrent sessions that write make a single measurement's rows anything)."""
    if min(sum(cid in m for m in base), sum(cid in m for m in other)) < 2:
        return False
    mine, theirs = _checksums(base, cid), _checksums(other, cid)
    return len(mine) == 1 and len(theirs) == 1 and mine != theirs


def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None
