"""What every workload timed by the wall clock shares (the query, script and replay kinds): its
objective, samples and figures, the regime a run was in and the rule that decides it.

The regime is judged from the server process's CPU time and the machine's iowait over the timed
run: one that waits on reads is I/O-bound, even when it also keeps a core busy; a scan that
keeps one core busy and does not wait is CPU-bound (`regime`, `REGIME_RULE`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from knoblab.records import Evidence, Metric, Objective
from knoblab.stats import Summary
from knoblab.vocabulary import TrialState
from knoblab.workloads.base import Note, StoredSeconds, StoredTrial, Workload

# What a statement's text may begin with before its first word.
LEADING_COMMENTS = re.compile(r"^(\s+|/\*.*?\*/|--[^\n]*|#[^\n]*)*", re.DOTALL)


@dataclass
class Measurement:
    """One timed run of SQL: its seconds, the rows it returned and what was seen around it."""

    seconds: float
    rows: int
    details: dict[str, object] = field(default_factory=dict)


class Timed(Workload):
    """What every workload timed by the wall clock (queries, scripts, replays) shares: lower is
    better, effects on time multiply (judged on medians, tested on log-times), one time per
    server start is one sample, and every run does the same work, however long it takes."""

    objective: ClassVar[Objective] = Objective(
        metric="seconds", unit="s", direction="minimize", centre="median", test="welch-log",
        time_series=False)
    metrics: ClassVar[Mapping[str, Metric]] = {"seconds": Metric(None, "s", "minimize")}

    @classmethod
    def samples(cls, trials: list[StoredTrial], stored: StoredSeconds,
                statistics: Mapping[str, Any]) -> list[float]:
        return [t.value for t in trials if t.status == TrialState.DONE and t.value is not None]

    @classmethod
    def evidence(cls, trials: list[StoredTrial], summary: Summary | None,
                 stored: StoredSeconds, statistics: Mapping[str, Any]) -> dict[str, Any]:
        return timing_evidence(trials, summary)

    @classmethod
    def notes(cls, points: Sequence[tuple[str, Evidence]]) -> list[Note]:
        """The rule the regime column follows, where a point has one."""
        if any(figures.regime for _, figures in points):
            return [(f"{REGIME_RULE[0].upper()}{REGIME_RULE[1:]}.", False)]
        return []


def timing_evidence(trials: list[StoredTrial], summary: Summary | None) -> dict[str, Any]:
    """A timed point's common figures, from its measurements as stored."""
    done = [t for t in trials if t.status == TrialState.DONE]
    regimes = Counter(r for t in done if (r := _regime_of(t.details)))
    return {
        "median": summary.median if summary else None,
        "ci95": [summary.ci_low, summary.ci_high] if summary else None,
        "mean": summary.mean if summary else None,
        "stdev": summary.stdev if summary else None,
        "samples": [t.value for t in done],
        "regime": regimes.most_common(1)[0][0] if regimes else None,
        "cpu_share": _mean(t.details.get("cpu_share") for t in done),
        "iowait_share": _mean(t.details.get("iowait_share") for t in done),
        "read_mb": _mean((t.details.get("read_bytes") or 0) / 1e6 for t in done),
        "os": {
            "disk_read_mb": _median((t.details.get("os") or {}).get("disk_read_bytes", 0) / 1e6
                                    for t in done),
            "disk_write_mb": _median((t.details.get("os") or {}).get("disk_write_bytes", 0) / 1e6
                                     for t in done),
            **{name: _median((t.details.get("os") or {}).get(name) for t in done)
               for name in ("cpu_user", "cpu_system", "cpu_iowait")},
        },
    }


def _regime_of(details: Mapping[str, Any]) -> str | None:
    """A measurement's regime by today's rule, from the figures it kept (a run stored under
    an earlier rule is judged anew); as stored when it kept no figures."""
    cpu, iowait = details.get("cpu_share"), details.get("iowait_share")
    if cpu is None or iowait is None:
        return details.get("regime")
    return regime(cpu, iowait, (details.get("read_bytes") or 0) + (details.get("write_bytes") or 0))


def _median(values: Any) -> float | None:
    items = [v for v in values if v is not None]
    return float(np.median(items)) if items else None


def _mean(values: Any) -> float | None:
    items = [v for v in values if v is not None]
    return round(sum(items) / len(items), 4) if items else None


# The regime's rule in the report's words (`regime` decides it so).
REGIME_RULE = ("regime: I/O-bound when the machine's CPUs waited on the disk for 10% or more "
               "of their time during the run (iowait), or the server read or wrote the disk "
               "while using under 40% of a core; else CPU-bound when the server kept a core "
               "75% busy or more; waiting when it did neither (locks, sleeps, a client that "
               "sets the pace); else mixed")
IOWAIT_BOUND = 0.10  # of all CPUs' time: the run waited on the disk


def regime(cpu_share: float, iowait_share: float, io_bytes: float) -> str:
    """I/O-bound when the run waited on the disk: the machine's iowait was 10% of its CPU
    time or more, or the server read or wrote while it used under 40% of a core. Waiting is
    judged first: a run that kept a core busy but also waited on reads for a tenth of the
    time is not limited by its CPU alone. Else CPU-bound when the server kept a core busy
    for 75% of the run; "waiting" when it did neither (locks, sleeps, a client that sets
    the pace); otherwise mixed. REGIME_RULE says the same to the user."""
    if iowait_share >= IOWAIT_BOUND or (cpu_share < 0.4 and io_bytes > 0):
        return "I/O-bound"
    if cpu_share >= 0.75:
        return "CPU-bound"
    return "waiting" if cpu_share < 0.4 else "mixed"
