"""The same study, run twice: on two machines, two server versions, two dates or two base
configurations. Point by point, the ratio of the second run's level to the first's with its
interval; whether the two agree on the best value; what differs between their machines and
specs. Runs that did not measure the same work are refused with the reason. A run not finished
is compared as far as it was measured, with a line saying which and how many of its
measurements are missing (its configurations compared point by point are as valid as the
finished run's, only fewer and not final); one that measured nothing is refused.

Read side only: both runs come from the store, as stored.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from knoblab import stats
from knoblab.errors import UserError
from knoblab.records import Point, Results
from knoblab.results import build_results, point_samples
from knoblab.store import Store
from knoblab.vocabulary import ComparisonVerdict, Experiment, PointVerdict, RunStatus
from knoblab.words import DESCRIPTIVE_KEYS
from knoblab.workloads.base import Rounds

# How a run was planned (rounds, budget, design) may differ between two runs of one study;
# what it measured may not.
_PLANNING = Rounds.KEYS.names | {"spending"}


@dataclass(frozen=True)
class Row:
    """One configuration measured by both runs."""

    label: str  # its settings, as "read_buffer_size=128K"
    first: float | None  # its level in the first run
    other: float | None  # and in the other
    change: stats.Change | None  # other / first, None when either is unmeasured
    p_adjusted: float | None  # Holm over the rows
    verdict: ComparisonVerdict


@dataclass(frozen=True)
class Comparison:
    """Another run against the first."""

    first: Results
    other: Results
    rows: list[Row]
    # Each run's leader shown better than some configuration (its label and verdict: "best"
    # when the run recommends it, else "fastest measured"); None when none was.
    best_first: str | None
    best_other: str | None
    agree: bool  # both runs lead with the same configuration and verdict, or neither leads
    machine: list[str]  # "cores: 2 in abc12345, 4 in def67890"
    spec: list[str]  # the lines of the specs that differ (a unified diff without headers)
    only_first: list[str]  # configurations one run measured and the other did not
    only_other: list[str]
    # A run not finished (interrupted, killed, failed, still running), one line each: which,
    # and how many of its measurements are missing. Its levels and its best are not final.
    incomplete: list[str] = field(default_factory=list)
    verdict_first: PointVerdict | None = None  # the verdicts of best_first and best_other
    verdict_other: PointVerdict | None = None


def compare_runs(store: Store, run_ids: list[str]) -> list[Comparison]:
    """Every run after the first against the first."""
    if len(run_ids) < 2:
        raise UserError("compare needs two runs or more: knoblab compare RUN_A RUN_B")
    found = [store.run(run_id) for run_id in run_ids]
    for run in found:
        if run["kind"] == Experiment.VERIFY:
            raise UserError(f"run {run['id']} is a verify (knoblab verify): its answer is its "
                            "own (knoblab runs shows it); compare the runs of studies")
        if run["kind"] == Experiment.CAPTURE:  # it measured nothing: no results to build
            folder = (run["info"].get("dataset") or {}).get("folder") or "its folder"
            raise UserError(f"run {run['id']} is a capture (knoblab capture), not a study: it "
                            "measured nothing to compare; tune what it captured with knoblab "
                            f"tune {folder}/spec.toml and compare those runs")
    runs = [build_results(store, run["id"]) for run in found]
    if len({r.run_id for r in runs}) < len(runs):
        raise UserError("the same run is named twice: compare different runs")
    samples = {r.run_id: point_samples(store, r.run_id) for r in runs}
    for other in runs[1:]:
        _check_comparable(runs[0], other)
    from knoblab.owners import run_state

    states = {run["id"]: run_state(run) for run in found}  # "killed": left running, now gone
    for r in runs:
        # Compared as far as it was measured, and said so; a run that measured nothing would
        # only be compared in "unmeasured" rows and agree with anything: refused.
        if r.status != RunStatus.DONE and not any(p.n for p in r.points):
            raise UserError(f"run {r.run_id} is {states[r.run_id]} and measured nothing yet: "
                            f"finish it first (knoblab resume {r.run_id}), then compare")
    return [_compare(runs[0], other, samples, states) for other in runs[1:]]


def incomplete_text(results: Results, state: str) -> str:
    """"" for a finished run; else one line: which run is not finished and how many of its
    measurements are missing (at least, for adaptive repetitions)."""
    if results.status == RunStatus.DONE:
        return ""
    measured = sum(p.n + p.failed for p in results.points)
    planned = results.workload.get("repetitions") or 1
    if planned == "auto":  # rounds go on until decided: the floor is what is known missing
        least = int(results.workload.get("min_repetitions") or 1) * len(results.points)
        missing = (f"at least {max(least - measured, 0):,} of its measurements are missing "
                   f"({measured:,} of {least:,} or more done)")
    else:
        total = int(planned) * len(results.points)
        missing = (f"{max(total - measured, 0):,} of its {total:,} "
                   f"measurement{'' if total == 1 else 's'} {'is' if total == 1 else 'are'} "
                   "missing")
    return (f"run {results.run_id} is incomplete ({state}): {missing}; its figures "
            f"and its best are not final (finish it: knoblab resume {results.run_id})")


def _check_comparable(first: Results, other: Results) -> None:
    why = None
    if first.experiment != other.experiment:
        why = f"one is a {first.experiment} run, the other a {other.experiment} run"
    elif first.workload.get("kind") != other.workload.get("kind"):
        why = (f"one measures a {first.workload.get('kind')} workload, the other a "
               f"{other.workload.get('kind')} workload")
    else:
        work = _work(first.workload), _work(other.workload)
        if work[0] != work[1]:
            keys = sorted(k for k in work[0].keys() | work[1].keys()
                          if work[0].get(k) != work[1].get(k))
            why = f"their workloads differ ({', '.join(keys)})"
        elif _data(first.dataset) != _data(other.dataset):
            data = _data(first.dataset), _data(other.dataset)
            keys = sorted(k for k in data[0].keys() | data[1].keys()
                          if data[0].get(k) != data[1].get(k))
            why = f"their data differ ({', '.join(keys)})"
        elif first.objective != other.objective:
            why = "they measure different things"
    if why:
        raise UserError(f"runs {first.run_id} and {other.run_id} cannot be compared: {why}; "
                        "compare runs of the same spec")


def _work(workload: dict) -> dict:
    return {k: v for k, v in workload.items() if k not in _PLANNING | DESCRIPTIVE_KEYS}


def _data(dataset: dict) -> dict:
    # its size on disk is measured, not asked for: two loads of one dataset may differ by a page
    return {k: v for k, v in dataset.items() if k != "bytes"}


def _label(point: Point) -> str:
    return ", ".join(f"{k}={v}" for k, v in point.settings.items())


def _compare(first: Results, other: Results, samples: dict[str, dict[int, list[float]]],
             states: dict[str, str] | None = None) -> Comparison:
    """`states`: each run's state as `knoblab runs` says it (default: as stored)."""
    states = states or {first.run_id: first.status, other.run_id: other.status}
    index_other = {_label(p): i for i, p in enumerate(other.points)}
    index_first = {_label(p): i for i, p in enumerate(first.points)}
    objective = first.objective
    statistics = first.statistics
    found: list[tuple[str, float | None, float | None, stats.Change | None]] = []
    for label, i in index_first.items():
        if label not in index_other:
            continue
        a, b = samples[first.run_id][i], samples[other.run_id][index_other[label]]
        change = None
        if len(a) >= 2 and len(b) >= 2:
            change = stats.compare(a, b, test=statistics.test, center=objective.centre,
                                   confidence=statistics.confidence)
        found.append((label, first.points[i].centre(objective),
                      other.points[index_other[label]].centre(objective), change))
    p_values = stats.holm([c.p_raw for *_, c in found if c is not None])
    rows, k = [], 0
    for label, a_level, b_level, change in found:
        if change is None:
            rows.append(Row(label, a_level, b_level, None, None, ComparisonVerdict.UNMEASURED))
            continue
        p = p_values[k]
        k += 1
        rows.append(Row(label, a_level, b_level, change, p,
                        _verdict(change, p, statistics.alpha, statistics.min_effect)))
    (best_first, verdict_first), (best_other, verdict_other) = _best(first), _best(other)
    return Comparison(
        first=first, other=other, rows=rows, best_first=best_first, best_other=best_other,
        agree=(best_first, verdict_first) == (best_other, verdict_other),
        verdict_first=verdict_first, verdict_other=verdict_other,
        machine=_machine_differences(first, other),
        spec=_spec_differences(first.spec, other.spec),
        only_first=[label for label in index_first if label not in index_other],
        only_other=[label for label in index_other if label not in index_first],
        incomplete=[line for line in (incomplete_text(first, states[first.run_id]),
                                      incomplete_text(other, states[other.run_id])) if line])


def change_header(comparison: Comparison) -> str:
    """The change column's header, with the level its intervals are at: "change [95% CI]"."""
    from knoblab.words import confidence_text

    return f"change [{confidence_text(comparison.first.statistics.confidence)} CI]"


def _verdict(change: stats.Change, p: float, alpha: float,
             min_effect: float) -> ComparisonVerdict:
    """Differs when significant and at least min_effect; the same when the whole interval
    lies within ±min_effect; else inconclusive."""
    if p < alpha and abs(change.ratio - 1) >= min_effect:
        return ComparisonVerdict.DIFFERS
    if 1 - min_effect <= change.ci_low and change.ci_high <= 1 + min_effect:
        return ComparisonVerdict.SAME
    return ComparisonVerdict.INCONCLUSIVE


def _best(results: Results) -> tuple[str | None, PointVerdict | None]:
    """The run's leader shown better than another configuration, with its verdict; (None,
    None) when it found no difference (any will do)."""
    best = next((p for p in results.points if p.verdict.leads), None)
    return (_label(best), best.verdict) if best is not None else (None, None)


def _machine_differences(first: Results, other: Results) -> list[str]:
    found = []
    names = list(dict.fromkeys([*first.machine, *other.machine]))
    for name in names:
        a, b = first.machine.get(name, "not recorded"), other.machine.get(name, "not recorded")
        if a != b:
            found.append(f"{name}: {a} in {first.run_id}, {b} in {other.run_id}")
    if first.server_version != other.server_version:
        found.append(f"server: {first.server_version} in {first.run_id}, "
                     f"{other.server_version} in {other.run_id}")
    if first.base != other.base:
        keys = sorted(k for k in first.base.keys() | other.base.keys()
                      if first.base.get(k) != other.base.get(k))
        found += [f"[server.config] {k}: {first.base.get(k, 'default')} in {first.run_id}, "
                  f"{other.base.get(k, 'default')} in {other.run_id}" for k in keys]
    return found


def _spec_differences(first: str, other: str) -> list[str]:
    diff = difflib.unified_diff(first.splitlines(), other.splitlines(), lineterm="", n=0)
    return [line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---")]
