"""What a trial measures, sized to the budget: a replay of a whole capture costs about as long
as the capture's window (a minute's capture, a minute a measurement), and a search needs
dozens of trials. So, where the workload can be cut to its first seconds and the budget is
known, the tune measures what a measurement costs (the baseline once, on the smallest part
trusted) and chooses the largest part whose trials the search's time holds, and for the
checks (validation, reduction, confirmation) the largest part that their measurements fit.
The choice is said in one line, kept with the study (every worker and invocation measures
the same part), and pinned by [tune] fidelity."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from knoblab.errors import UserError
from knoblab.units import format_duration
from knoblab.workloads.base import Workload

# The smallest part of a capture a search is trusted on: on a real 60-s capture (sysbench
# oltp_read_write, 1.08 M statements) its first 5 s ordered every pair of configurations the
# whole tells apart (13 of 28, 15% or more apart) as the whole does, kept production's 32M
# pool 1.72 times as slow as the best (1.74 on the whole) and chose the whole's fastest
# configuration (docs/benchmarks.md, "A real capture's slices").
SMALLEST = 5.0
# The parts tried, in seconds of the capture: the largest that fits is chosen.
PARTS = (5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0)
# Trials a search of a dozen settings needs to land near the optimum (on the known-truth
# surfaces of docs/benchmarks.md: within 5% in every seed at ~60 trials, in none at 20), and
# per setting for larger spaces.
WANTED_TRIALS = 30
PER_SETTING = 2.5
# Measurements a trial costs on the average: its first step measures the baseline and the
# candidate once each (a warm trial's with an untimed pass before each, on a start shared by
# six), and the few the pruner keeps go on.
PER_TRIAL = 2.5
# The search's least share of the budget, and its most (the checks need some of it even
# when they are cheap: a validation decided in its first rounds).
LEAST_SHARE, MOST_SHARE = 0.4, 0.75
# The rounds a check measures: its least (Rounds.floor), where a gain worth recommending is
# decided (on a real capture, a 1.7x gain validated in 3 rounds; the reduction's groups that do
# nothing go on until its share of the budget is spent, whatever it is).
CHECK_ROUNDS = 3


@dataclass(frozen=True)
class Fidelity:
    """The parts the search's trials and the checks measure (None: the whole workload), what
    a measurement of each is expected to cost, and the search's share of the budget."""

    search: str | None
    check: str | None
    search_cost: float  # seconds a measurement of the search's part takes, start included
    check_cost: float
    share: float
    said: str

    def describe(self) -> dict[str, Any]:
        return {"search": self.search, "check": self.check, "search_cost": self.search_cost,
                "check_cost": self.check_cost, "share": self.share, "said": self.said}

    @classmethod
    def from_info(cls, info: dict[str, Any]) -> Fidelity:
        return cls(info["search"], info["check"], float(info["search_cost"]),
                   float(info["check_cost"]), float(info["share"]), str(info["said"]))


def check_measurements(validate: int, settings: int) -> float:
    """The measurements the checks take at the least: each candidate validated against the
    baseline, the recommendation's settings put back in groups (halving: twice the rounds of
    a binary search over them), and the recommendation confirmed."""
    groups = 2 * max(1, math.ceil(math.log2(max(2, settings)))) + 1
    return CHECK_ROUNDS * (2 * validate + groups + 2)


def wanted_trials(settings: int) -> int:
    return max(WANTED_TRIALS, math.ceil(PER_SETTING * settings))


def plan(workload: Workload, pinned: str, budget: float, settings: int, validate: int,
         measure: Callable[[Workload], float]) -> Fidelity | None:
    """The parts to measure, for a search of `settings` settings within `budget` seconds
    validating `validate` candidates: None when the workload is measured whole (it cannot
    be cut, or [tune] fidelity = "whole"). `measure` measures the baseline once on a part
    and returns the seconds it took, start included. UserError when the budget cannot hold
    one checked recommendation even on the smallest part."""
    span = workload.span
    if pinned not in ("auto", "whole"):
        part, _ = workload.cut(pinned, "[tune] fidelity")
        each = measure(part)
        return Fidelity(pinned, pinned, each, each, LEAST_SHARE,
                        f"trials and checks replay {pinned} of the capture, as [tune] "
                        f"fidelity says ({format_duration(each)} a measurement)")
    if pinned == "whole" or span is None or span <= SMALLEST * 1.5:
        return None
    smallest, _ = workload.cut(f"{SMALLEST:g}s", "[tune] fidelity")
    measured = measure(smallest)

    def cost(seconds: float) -> float:
        # A part's first seconds run on an empty buffer pool and are the slowest: scaled
        # from the smallest part, a larger one is costed high, never low.
        return measured * seconds / SMALLEST

    parts = [s for s in PARTS if s < span] + [span]
    checks = check_measurements(validate, settings)
    least = checks * measured + 3 * PER_TRIAL * measured
    if budget < least + measured:
        raise UserError(
            f"a budget of {format_duration(budget)} cannot hold one checked recommendation: "
            f"a measurement of the capture's first {SMALLEST:g} s takes "
            f"{format_duration(measured)} here, and a few trials and the checks of the best "
            f"take {format_duration(least)} at the least; give --budget "
            f"{math.ceil((least + measured) / 60)}m or more")
    wanted = wanted_trials(settings)
    # The checks' part: the largest whose measurements leave the search its least share.
    check = max((s for s in parts if checks * cost(s) <= budget * (1 - LEAST_SHARE)),
                default=SMALLEST)
    share = min(MOST_SHARE, max(LEAST_SHARE, 1 - checks * cost(check) / budget))
    search = max((s for s in parts if s <= check
                  and budget * share / (PER_TRIAL * cost(s)) >= wanted), default=SMALLEST)
    trials = budget * share / (PER_TRIAL * cost(search))
    name = _name(search, span)
    said = (f"a measurement of the whole capture ({format_duration(span)}) would take up to "
            f"{format_duration(cost(span))} here; trials replay "
            + ("all of it" if name is None else f"its first {format_duration(search)}")
            + f" ({format_duration(cost(search))} a measurement: about {trials:.0f} trials in "
            f"the search's {share:.0%} of the budget"
            + (f", fewer than the {wanted} a search of {settings} settings wants: a larger "
               f"budget buys more" if trials < wanted else "")
            + "), the checks "
            + ("all of it" if _name(check, span) is None else
               f"its first {format_duration(check)}")
            + "; [tune] fidelity pins it")
    return Fidelity(name, _name(check, span), cost(search), cost(check), share, said)


def _name(seconds: float, span: float) -> str | None:
    return None if seconds >= span else f"{seconds:g}s"
