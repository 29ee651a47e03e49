"""The results of a run, built from the store's read side: the records of knoblab.records.

Every point is judged within its slice; a steps run gets a table of its steps per slice; runs on
several servers compare them configuration by configuration. Numbers and verdicts only: the
sentences are the report's.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any, cast

import numpy as np

from knoblab import evidence, safety, stats, words, workloads
from knoblab.classes import ClassComparison, compare_classes
from knoblab.errors import UserError
from knoblab.judging import Statistics
from knoblab.records import (
    Alone,
    Comparison,
    Conclusion,
    ExplainingCounter,
    Explanation,
    Interaction,
    Noise,
    Objective,
    Point,
    RecommendedSteps,
    Results,
    Rounds,
    ServerInfo,
    ServerRow,
    ServersCompared,
    Settings,
    SliceConclusion,
    Steady,
    Step,
    StepRow,
    StepsTable,
    evidence_from_json,
)
from knoblab.store import RunInfo, Store, Trial
from knoblab.vocabulary import (
    Experiment,
    Finding,
    PointVerdict,
    RunStatus,
    StepRole,
    StepVerdict,
    TrialState,
)
from knoblab.workloads.base import Rounds as Planned
from knoblab.workloads.base import StoredTrial, Workload


def build_results(store: Store, run_id: str) -> Results:
    run = store.run(run_id)
    info = RunInfo.from_json(run["info"])
    point_list = store.points(run["id"])
    by_point: dict[int, list[Trial]] = defaultdict(list)
    for trial in store.trials(run["id"]):
        by_point[trial.point_idx].append(trial)
    statistics = info.statistics
    kind = _kind(store, run["id"], info.workload_kind)
    objective = kind.objective
    # Thread counts and dataset variants are compared within themselves: the best setting may
    # differ per thread count or data size, and times at 1M and 4M rows are not comparable.
    # Several servers: each is judged on its own (a setting may suit one build and not
    # another); the servers are then compared with each other configuration by configuration.
    slices = [k for k in ("binary", *kind.parameters) if point_list and k in point_list[0][0]]
    # The sandbox's machine, when swept: each shape is a machine of its own, judged apart.
    slices += [k for k in (point_list[0][0] if point_list else {}) if k.startswith("machine.")]
    steps = [None if s is None else Step.from_json(s)
             for s in info.steps or [None] * len(point_list)]
    stored = _StoredSeconds(store, run["id"])
    settings = asdict(statistics)  # the kinds read the run's statistics settings by name
    trials = _as_stored(by_point, len(point_list))
    samples = _checked(store, run["id"], statistics,
                       {idx: kind.samples(trials[idx], stored, settings) for idx in trials})
    blocks = {idx: found for idx in trials
              if (found := _blocks(by_point[idx], len(samples[idx]))) is not None}
    rounds = _rounds(Planned.from_info(info.workload), by_point, info, statistics)
    levels = None if rounds.level_worse is None or rounds.level_same is None else \
        stats.Levels(rounds.level_worse, rounds.level_same)
    verdicts, judgements = _judge_slices(samples, [r for r, _ in point_list], slices, objective,
                                         statistics, levels, blocks)
    complete = run["status"] == RunStatus.DONE
    points = [_point(idx, requested, config, verdicts[idx], by_point[idx], info, complete,
                     steps[idx], kind.evidence(trials[idx], verdicts[idx].summary, stored,
                                               settings), objective.time_series)
              for idx, (requested, config) in enumerate(point_list)]
    tables = _steps(points, samples, slices, objective, statistics) if info.steps else None
    conclusion = _conclusion(points, judgements, slices, tables, complete=complete,
                             samples=samples, objective=objective, statistics=statistics)
    points = _as_recommended(points, conclusion, slices, objective)
    return Results(
        run_id=run["id"],
        name=run["name"],
        experiment=Experiment(run["kind"]),
        status=RunStatus(run["status"]),
        objective=objective,
        server_binary=run["server_binary"],
        server_version=run["server_version"],
        servers=_servers(run, info),
        workload=info.workload,
        dataset=info.dataset,
        steady=None if info.steady is None else Steady(**info.steady),
        knobs=list(point_list[0][0]) if point_list else [],
        slices=slices,
        base=info.base,
        regime=_overall_regime(points),
        statistics=statistics,
        points=points,
        noise=_noise([t for of_point in by_point.values() for t in of_point
                      if t.status == TrialState.DONE]),
        explained_by=_explanations(by_point, point_list, slices, steps, kind),
        tied=info.tied,
        warnings=info.warnings + _warnings(points) + _different_work(points, by_point, slices)
        + _speed_levels(samples) + _busy_client(by_point),
        steps=tables,
        servers_compared=_servers_compared(points, samples, objective, statistics, levels,
                                           blocks)
        if "binary" in slices else None,
        conclusion=conclusion,
        rounds=rounds,
        machine=info.machine,
        started_at=run["created_at"],
        finished_at=run["finished_at"],
        spec=run["spec_source"] or "",
        knoblab_version=info.knoblab_version,
        statement_classes=_statement_classes(points, by_point, slices,
                                             kind.statement_classes(info.workload),
                                             statistics.alpha),
    )


def _servers(run: dict[str, Any], info: RunInfo) -> list[ServerInfo]:
    """The servers the run measured, as it recorded them; one named by the run's row for a
    run from before they were recorded."""
    return [ServerInfo.from_json(s) for s in info.servers] or [ServerInfo(
        label="", binary=run["server_binary"], endpoint=None, version=run["server_version"],
        version_line=None, compile={}, missing=[], error=None)]


def _point(idx: int, requested: dict[str, str], config: dict[str, str], verdict: stats.Verdict,
           trials: list[Trial], info: RunInfo, complete: bool, step: Step | None,
           explained: dict[str, Any], time_series: bool) -> Point:
    """One point of the run, as its trials and its verdict among the others make it."""
    if not complete and verdict.verdict == PointVerdict.BEST:
        # A run not finished crowns nothing: its missing measurements could change it.
        verdict = replace(verdict, verdict=PointVerdict.INCONCLUSIVE)
    done = [t for t in trials if t.status == TrialState.DONE]
    failed = [t for t in trials if t.status == TrialState.FAILED]
    unavailable = {int(i): why for i, why in info.unavailable.items()}.get(idx)
    return Point(
        settings=requested,
        config=config,
        effective=_effective(done, list(config)),
        is_default=bool(info.defaults) and all(info.defaults.get(k) == v
                                               for k, v in config.items()),
        n=len(done),
        failed=len(failed),
        ratio_to_best=verdict.ratio_to_best,
        p_value=verdict.p_adjusted,
        p_equivalent=verdict.p_equivalent,
        extra_rounds=verdict.extra,
        # Nothing measured and nothing failed: the run stopped before it got there.
        verdict=PointVerdict.NOT_RUN if not done and not failed and unavailable is None
        else verdict.verdict,
        errors=sorted({t.error for t in failed if t.error}) +
        ([unavailable] if unavailable is not None else []),
        unavailable=unavailable,
        # What a crash could cost with this point's settings: shown on a line of its own.
        durability=safety.durability_costs({**info.base, **config}),
        step=step,
        evidence=evidence_from_json(explained, time_series),
    )


def _as_recommended(points: list[Point], conclusion: Conclusion, slices: list[str],
                    objective: Objective) -> list[Point]:
    """The leader of each slice is "best" only when its slice's conclusion recommends it;
    else it is what it was measured to be ("fastest measured"), in every output alike."""
    def demoted(point: Point) -> Point:
        if point.verdict != PointVerdict.BEST or conclusion.of_slice(
                {k: point.settings[k] for k in slices}).best == point.settings:
            return point
        return replace(point, verdict=words.leader_verdict(objective.direction))

    return [demoted(p) for p in points]


def _statement_classes(points: list[Point], by_point: dict[int, list[Trial]],
                       slices: list[str], fingerprints: dict[str, str],
                       alpha: float) -> ClassComparison | None:
    """A replayed log's classes under each configuration against the defaults (when measured)
    or the best; within one slice only (a comparison across builds is the servers')."""
    if slices or len(points) < 2 or not fingerprints:
        return None
    measured = [i for i, p in enumerate(points) if p.n]
    defaults = [i for i in measured if points[i].is_default]
    best = [i for i in measured if points[i].ratio_to_best is not None]
    if not defaults and not best:
        return None
    reference = defaults[0] if defaults else min(best, key=lambda i: points[i].ratio_to_best
                                                 or 0.0)
    done = {idx: [t for t in trials if t.status == TrialState.DONE]
            for idx, trials in by_point.items()}
    return compare_classes(done, reference, fingerprints, alpha,
                           settings={i: p.settings for i, p in enumerate(points)})


def point_samples(store: Store, run_id: str) -> dict[int, list[float]]:
    """Each point's samples, as its verdicts were judged on (one per independent unit of
    replication: a time, or a run's steady mean)."""
    run = store.run(run_id)
    info = RunInfo.from_json(run["info"])
    by_point: dict[int, list[Trial]] = defaultdict(list)
    for trial in store.trials(run["id"]):
        by_point[trial.point_idx].append(trial)
    kind = _kind(store, run["id"], info.workload_kind)
    trials = _as_stored(by_point, len(store.points(run["id"])))
    stored = _StoredSeconds(store, run["id"])
    return _checked(store, run["id"], info.statistics,
                    {idx: kind.samples(trials[idx], stored, asdict(info.statistics))
                     for idx in trials})


def _kind(store: Store, run_id: str, name: str) -> type[Workload]:
    """The workload kind a stored run names; one this knoblab does not know is one line."""
    try:
        return workloads.kind(name)
    except KeyError:
        raise UserError(f"the results store {store.name}: run {run_id} was measured with a "
                        f"workload kind this knoblab does not know ({name!r}): a newer "
                        "knoblab wrote it, or the store is damaged") from None


def _checked(store: Store, run_id: str, statistics: Statistics,
             samples: dict[int, list[float]]) -> dict[int, list[float]]:
    """Samples the run's test can judge: finite, and above 0 for a test of times (a time of 0
    or less was never measured); any other is a damaged store, in one line."""
    for idx, values in samples.items():
        for value in values:
            if not np.isfinite(value) or (statistics.test == "welch-log" and value <= 0):
                raise UserError(f"the results store {store.name} is damaged: in run {run_id}, "
                                f"point {idx} has a measured value of {value}, which no "
                                "measurement gives; restore the store from a backup (or "
                                "delete that run)")
    return samples


def _as_stored(by_point: dict[int, list[Trial]], points: int) -> dict[int, list[StoredTrial]]:
    # The kinds see a trial as the protocol's StoredTrial (lists are invariant: copied as such).
    return {idx: list(by_point[idx]) for idx in range(points)}


def _rounds(planned: Planned, by_point: dict[int, list[Trial]], info: RunInfo,
            statistics: Statistics) -> Rounds:
    """Rounds measured so far (a round is complete when its every point was measured or
    failed), and for adaptive repetitions the levels of the look after the last of them."""
    finished: dict[int, set[int]] = defaultdict(set)
    for point_idx, trials in by_point.items():
        for trial in trials:
            if trial.status in (TrialState.DONE, TrialState.FAILED):
                finished[trial.repetition].add(point_idx)
    planned_points = {idx for idx in by_point} | {idx for ids in finished.values() for idx in ids}
    done = 0
    while finished.get(done) and finished[done] >= planned_points:
        done += 1
    stopped = (info.stopped or {}).get("reason")
    design = info.design or {}
    name, why = design.get("name"), design.get("why")
    if planned.fixed is not None:
        return Rounds(done, False, None, None, None, None, None, None, name, why)
    levels = None
    if done >= planned.floor:
        levels = stats.Levels.sequential(statistics.alpha, done, planned.floor, planned.ceiling,
                                         "obf" if planned.spending == "obf" else "pocock")
    return Rounds(done, True, planned.floor, planned.ceiling, planned.budget, stopped,
                  None if levels is None else levels.worse,
                  None if levels is None else levels.same, name, why)


class _StoredSeconds:
    """A run's per-second rows, read from the store once, when a kind first asks."""

    def __init__(self, store: Store, run_id: str) -> None:
        self._store, self._run_id = store, run_id
        self._seconds: dict[int, list[dict[str, float]]] | None = None
        self._os: dict[int, list[dict[str, float]]] | None = None

    def seconds(self) -> dict[int, list[dict[str, float]]]:
        if self._seconds is None:
            self._seconds = self._store.seconds(self._run_id)
        return self._seconds

    def os_seconds(self) -> dict[int, list[dict[str, float]]]:
        if self._os is None:
            self._os = self._store.os_seconds(self._run_id)
        return self._os


def _slice_groups(settings: Sequence[Mapping[str, str]],
                  slices: list[str]) -> dict[tuple[str, ...], list[int]]:
    """The indexes of the points of each slice, by the slice's values, in order of appearance."""
    groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for idx, requested in enumerate(settings):
        groups[tuple(requested[k] for k in slices)].append(idx)
    return groups


SliceJudgement = tuple[Settings, list[int], stats.Judgement]


def _blocks(trials: list[Trial], samples: int) -> list[str] | None:
    """The block of each sample: the server start it was measured on in a blocked design,
    else its round (measured close in time to the other points of the round); None when the
    kind's samples are not one per measurement (batch means of a single start)."""
    done = [t for t in trials if t.status == TrialState.DONE and t.value is not None]
    if len(done) != samples:
        return None
    return [str(t.details.get("block", f"round {t.repetition}")) for t in done]


def _judge_slices(samples: dict[int, list[float]], settings: list[Settings], slices: list[str],
                  objective: Objective, statistics: Statistics, levels: stats.Levels | None,
                  blocks: dict[int, list[str]]
                  ) -> tuple[dict[int, stats.Verdict], list[SliceJudgement]]:
    """Verdicts judged within each slice (all points form one slice when there are none)."""
    verdicts: dict[int, stats.Verdict] = {}
    judgements = []
    for key, members in _slice_groups(settings, slices).items():
        judgement = _judge(samples, members, objective, statistics, levels, blocks)
        verdicts.update(zip(members, judgement.verdicts, strict=True))
        judgements.append((dict(zip(slices, key, strict=True)), members, judgement))
    return verdicts, judgements



def _judge(samples: dict[int, list[float]], members: list[int], objective: Objective,
           statistics: Statistics, levels: stats.Levels | None = None,
           blocks: dict[int, list[str]] | None = None) -> stats.Judgement:
    """The run's statistics settings applied to some of its points: the best and the rest.
    Its verdicts are in the order of `members`."""
    return stats.judge(
        {idx: samples[idx] for idx in members},
        direction=objective.direction,
        min_effect=statistics.min_effect, alpha=statistics.alpha,
        test=statistics.test, confidence=statistics.confidence,
        seed=statistics.seed, center=objective.centre, levels=levels,
        blocks=None if blocks is None else {idx: blocks[idx] for idx in members if idx in blocks},
    )


def _conclusion(points: list[Point], judgements: list[SliceJudgement], slices: list[str],
                tables: list[StepsTable] | None, complete: bool,
                samples: dict[int, list[float]], objective: Objective,
                statistics: Statistics) -> Conclusion:
    """What the run concludes; a run that did not finish recommends nothing (its missing
    measurements could change any verdict) and crowns nothing."""
    if not complete:
        judgements = [(values, members, replace(judgement, significant=False))
                      for values, members, judgement in judgements]
        tables = None
    parts = []
    for slice_values, members, judgement in judgements:
        best = cast(int | None, judgement.crowned)  # nothing shown worse: nothing crowned
        parts.append(_slice_conclusion(slice_values, members, judgement, points, samples,
                                       objective, statistics, complete,
                                       None if best is None else points[best].settings))
    recommended_steps = None if tables is None else [
        RecommendedSteps(table.slice, table.helped()) for table in tables]
    if slices:  # several slices: no single best; each slice has its own
        return Conclusion(any(p.significant for p in parts), None, None, parts,
                          recommended_steps)
    if not parts:
        return Conclusion(False, None, None, None, recommended_steps)
    part = parts[0]
    return Conclusion(part.significant, part.best, part.recommended, None, recommended_steps,
                      part.fastest, part.finding, part.versus_current)


def _slice_conclusion(slice_values: Settings, members: list[int],
                      judgement: stats.Judgement, points: list[Point],
                      samples: dict[int, list[float]], objective: Objective,
                      statistics: Statistics, complete: bool,
                      best: Settings | None) -> SliceConclusion:
    """One slice's recommendation. A change must be shown to help to be recommended: the
    fastest measured point is recommended only when the current configuration (the server's
    defaults, measured) was shown worse than it and the interval of the change agrees
    (knoblab.words.agrees); otherwise the current configuration is kept. A current
    configuration that was not measured, or failed, shows no change to help."""
    leader = cast(int | None, judgement.best)
    fastest = None if leader is None or not complete else points[leader].settings
    current = next((i for i in members if points[i].is_default), None)
    if not complete or leader is None or current is None or not samples[current]:
        # Nothing is recommended, so nothing is best: the leader is the fastest measured.
        return SliceConclusion(slice_values, judgement.significant, None, None, fastest,
                               None if current == leader or not complete else Finding.UNSHOWN)
    if current == leader:  # the current configuration is the fastest measured: no change
        return SliceConclusion(slice_values, judgement.significant, best,
                               points[current].settings, fastest, None)
    change = stats.compare(samples[current], samples[leader], test=statistics.test,
                           center=objective.centre, confidence=statistics.confidence,
                           seed=statistics.seed)
    compared = Comparison(ratio=change.ratio, ci95=(change.ci_low, change.ci_high),
                          p_value=points[current].p_value or 1.0,
                          significant=points[current].verdict == PointVerdict.WORSE)
    shown = words.change_finding(points[current].verdict)
    _, interval = compared.gain(objective.direction)
    finding = shown if _shows(shown, interval, statistics.min_effect) else Finding.UNSHOWN
    recommended = fastest if finding == Finding.HELPS else points[current].settings
    return SliceConclusion(slice_values, judgement.significant,
                           best if best == recommended else None, recommended, fastest,
                           finding, compared)


def _shows(finding: Finding, interval: tuple[float, float], min_effect: float) -> bool:
    """Whether the interval shows what the test found: "the same" when it lies within
    ±min_effect (on whichever side of zero), else as knoblab.words.agrees."""
    if finding == Finding.SAME:
        return -min_effect < interval[0] and interval[1] < min_effect
    return words.agrees(finding, interval, min_effect)


def _effective(done: list[Trial], knobs: list[str]) -> dict[str, str]:
    """The value the server applied; if starts disagreed (they should not), all of them."""
    values: dict[str, list[str]] = {}
    for trial in done:
        for name in knobs:
            value = trial.effective.get(name)
            if value is not None and value not in values.setdefault(name, []):
                values[name].append(value)
    return {name: " / ".join(v) for name, v in values.items()}


def _overall_regime(points: list[Point]) -> str | None:
    regimes = {p.evidence.regime for p in points if p.evidence.regime}
    if not regimes:
        return None
    return regimes.pop() if len(regimes) == 1 else "mixed"


def _warnings(points: list[Point]) -> list[str]:
    warnings = []
    if any(p.time_series and p.time_series.compared == "batch means of one start"
           for p in points):
        warnings.append("some values ran on a single server start: their tests compare runs, "
                        "and a difference between starts (often a few percent) is not "
                        "separated from the setting's effect; use repetitions >= 2")
    live = [p for p in points if p.n]
    knobs = list(live[0].config) if live else []
    for name in knobs:
        applied = {p.effective.get(name) for p in live}
        if len(live) > 1 and len(applied) == 1:
            warnings.append(f"the server applied the same {name} ({applied.pop()}) for every "
                            "value: this sweep measures noise")
    return warnings


# The client's CPU at half the server's or more: on a machine of few cores they compete for it.
BUSY_CLIENT = 0.5


def _busy_client(by_point: dict[int, list[Trial]]) -> list[str]:
    """A warning when knoblab's own client (a script's or a replay's) used half as much CPU as
    the server or more: on this machine they compete, and the client may set the pace."""
    shares = [client / server for trials in by_point.values() for t in trials
              if t.status == TrialState.DONE
              and (client := t.details.get("client_cpu_seconds")) is not None
              and (server := t.details.get("cpu_seconds"))]
    if not shares or float(np.median(shares)) < BUSY_CLIENT:
        return []
    return [f"knoblab's client used {float(np.median(shares)):.0%} as much CPU as the server "
            "(median over the measurements): on a machine of few cores they compete for it, "
            "and the client may set the pace; a difference the server makes is then measured "
            "smaller than it is"]


def _speed_levels(samples: dict[int, list[float]]) -> list[str]:
    """A warning when the measurements of most points fall into the same two levels: the
    machine's speed changing under the run, not the setting."""
    found = stats.speed_levels(samples)
    if found is None:
        return []
    return [f"the measurements fall into two speed levels {(found.ratio - 1) * 100:.0f}% apart "
            f"({found.fast} and {found.slow} measurements), at {found.points_with_both} of "
            f"{found.points} values alike: this machine changes speed under the run, not the "
            "setting; comparisons within a start or a round (the report's design) cancel what "
            "they share, and more rounds average the rest"]


def _different_work(points: list[Point], by_point: dict[int, list[Trial]],
                    slices: list[str]) -> list[str]:
    """Measurements of one slice whose statement returned different numbers of rows did not
    do the same work (data changed, a setting changed the result): said, never averaged."""
    warnings = []
    for values, members in _slice_groups([p.settings for p in points], slices).items():
        rows: dict[str, set[int]] = {}
        for idx in members:
            for trial in by_point[idx]:
                if trial.status == TrialState.DONE and "rows" in trial.details:
                    rows.setdefault(_point_name(points[idx].settings, points[idx].step,
                                                slices), set()).add(int(trial.details["rows"]))
        if len(set().union(*rows.values()) if rows else set()) > 1:
            where = "".join(f" at {k}={v}" for k, v in zip(slices, values, strict=True))
            counts = "; ".join(f"{name}: {', '.join(map(str, sorted(found)))}"
                               for name, found in rows.items())
            warnings.append(f"the measurements{where} returned different numbers of rows "
                            f"({counts}): they did not all do the same work, so their times "
                            "are not comparable")
    return warnings


def _explanations(by_point: dict[int, list[Trial]],
                  point_list: list[tuple[Settings, Settings]], slices: list[str],
                  steps: list[Step | None], kind: type[workloads.Workload]
                  ) -> list[Explanation]:
    """Per slice, the server's figures that moved with the setting, consistently, in words:
    counters per unit of work (per transaction of a fixed-time run), so that a counter that
    only grows with the work done is never offered as the reason, costs first; then, if room
    is left, levels as they were at the end of each measurement (knoblab.evidence says which
    is which). Positions (LSNs, transaction ids) are neither and never explain."""
    found_by_slice = []
    for key, members in _slice_groups([r for r, _ in point_list], slices).items():
        done = [(idx, t, t.value) for idx in members for t in by_point[idx]
                if t.status == TrialState.DONE and t.value is not None]
        if len({idx for idx, _, _ in done}) < 2:
            continue
        counters: list[tuple[Hashable, float, Mapping[str, float]]] = [
            (idx, value, _per_unit(t.details.get("status") or {}, kind.work_done(t.details)))
            for idx, t, value in done if value is not None]
        levels: list[tuple[Hashable, float, Mapping[str, float]]] = [
            (idx, value, _numbers(t.details.get("levels") or {}))
            for idx, t, value in done if value is not None]
        labels: dict[Hashable, str] = {idx: _point_name(point_list[idx][0], steps[idx], slices)
                                       for idx in members}
        found = evidence.explaining_counters(counters)
        found += evidence.explaining_counters(levels, kind="level", top=5 - len(found))
        explained = [ExplainingCounter(
            counter=ev.name,
            per_point={labels[k]: v for k, v in ev.per_point.items()},
            eta_squared=round(ev.eta_squared, 3),
            spearman=None if ev.spearman is None else round(ev.spearman, 3),
            text=evidence.describe(ev, labels.__getitem__, f"per {kind.unit_of_work}"),
        ) for ev in found]
        found_by_slice.append(Explanation(dict(zip(slices, key, strict=True)), explained))
    return found_by_slice


def _numbers(values: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for name, value in values.items():
        try:
            out[name] = float(value)
        except (TypeError, ValueError):
            continue
    return out


def _per_unit(counters: Mapping[str, Any], work: float | None) -> dict[str, float]:
    """A measurement's counter deltas divided by the work it did (as they were when every
    measurement does the same work); levels and positions are left out: they are not amounts
    of work, and their delta per unit of work means nothing."""
    counts = _numbers({name: value for name, value in counters.items()
                       if evidence.kind_of(name) == "counter"})
    return {name: value / work for name, value in counts.items()} if work else counts


def _point_name(requested: Settings, step: Step | None, slices: list[str]) -> str:
    """A point within its slice: "step 2", "step 2 alone", or its values ("64K, 2M")."""
    if step is not None:
        return f"step {step.number}{' alone' if step.role == StepRole.ALONE else ''}"
    return ", ".join(str(v) for k, v in requested.items() if k not in slices)


def _noise(done: list[Trial]) -> Noise | None:
    """How much identical timed runs on one server start differ: the machine's noise floor."""
    spreads = []
    for trial in done:
        runs = trial.details.get("runs") or []
        if len(runs) > 1 and min(runs) > 0:
            spreads.append(max(runs) / min(runs) - 1)
    if not spreads:
        return None
    spreads.sort()
    return Noise(starts=len(spreads), spread_median=round(spreads[len(spreads) // 2], 4),
                 spread_max=round(spreads[-1], 4))


def _settle(family: list[stats.Change], statistics: Statistics) -> list[Comparison]:
    """Holm over one family of comparisons, then significance: p below alpha and an effect of
    at least the minimum effect."""
    return [Comparison(ratio=change.ratio, ci95=(change.ci_low, change.ci_high),
                       p_value=adjusted,
                       significant=bool(adjusted < statistics.alpha and
                                        abs(change.ratio - 1) >= statistics.min_effect))
            for change, adjusted in zip(family, stats.holm([c.p_raw for c in family]),
                                        strict=True)]


def _better(change: Comparison, objective: Objective) -> bool:
    return change.ratio < 1 if objective.direction == "minimize" else change.ratio > 1


def _steps(points: list[Point], samples: dict[int, list[float]], slices: list[str],
           objective: Objective, statistics: Statistics) -> list[StepsTable]:
    """The article's table per slice: every step against the previous measured step and
    against step 0, each change alone against step 0 when measured, and the total."""
    return [_steps_table(dict(zip(slices, key, strict=True)), members, points, samples,
                         objective, statistics)
            for key, members in _slice_groups([p.settings for p in points], slices).items()]


def _steps_table(slice_values: Settings, members: list[int], points: list[Point],
                 samples: dict[int, list[float]], objective: Objective,
                 statistics: Statistics) -> StepsTable:
    """One slice's steps. All its comparisons form one Holm family: a table of many steps
    should not call one of them significant by chance."""
    placed = {idx: step for idx in members if (step := points[idx].step) is not None}
    cumulative = sorted((i for i, s in placed.items() if s.role == StepRole.CUMULATIVE),
                        key=lambda i: placed[i].number)
    alone = {s.number: i for i, s in placed.items() if s.role == StepRole.ALONE}
    base = cumulative[0]
    pairs: list[tuple[int, int]] = []

    def measure(a: int, b: int) -> int | None:
        """Point b against point a: its place in the family; None when a side has no samples."""
        if not samples[a] or not samples[b]:
            return None
        pairs.append((a, b))
        return len(pairs) - 1

    # First every comparison, then Holm over all of them, then the rows with their verdicts.
    # Per step: its point, its verdict unless judged on its change, the places in the family
    # of its changes against the step before and the base, and its change alone.
    planned: list[tuple[int, StepVerdict | None, int | None, int | None,
                        tuple[int, int | None] | None]] = []
    previous = base
    for idx in cumulative:
        verdict: StepVerdict | None = StepVerdict.BASE if idx == base else None
        vs_previous: int | None = None
        vs_base: int | None = None
        alone_of: tuple[int, int | None] | None = None
        if idx != base:
            if points[idx].unavailable:
                # Not run here: its values were already in force, or this server lacks them.
                verdict = StepVerdict.CHANGES_NOTHING \
                    if points[idx].unavailable == StepVerdict.CHANGES_NOTHING \
                    else StepVerdict.UNAVAILABLE
            elif not samples[idx]:
                verdict = StepVerdict.FAILED
            else:
                vs_previous, vs_base = measure(previous, idx), measure(base, idx)
                previous = idx
            number = placed[idx].number
            if number in alone and samples[alone[number]]:
                alone_of = (alone[number], measure(base, alone[number]))
        planned.append((idx, verdict, vs_previous, vs_base, alone_of))
    # The intervals hold for the whole family at once (Bonferroni), as the verdicts are
    # judged over the whole family (Holm): a 95% interval of each comparison alone would
    # show a change wholly on one side where the family's test does not decide it.
    family_confidence = 1.0 - (1.0 - statistics.confidence) / max(1, len(pairs))
    family = [_tested_change(samples[a], samples[b], objective, statistics, family_confidence)
              for a, b in pairs]
    settled = _settle(family, statistics)

    def result(position: int | None) -> Comparison | None:
        return None if position is None else settled[position]

    rows = []
    for idx, verdict, vs_previous, vs_base, alone_of in planned:
        point, step, change = points[idx], placed[idx], result(vs_previous)
        if verdict is None:
            # no change to judge: the previous step failed, there is nothing to compare with
            verdict = StepVerdict.FAILED if change is None else _step_verdict(change, objective,
                                                                   statistics)
        rows.append(StepRow(
            step=step.number, label=step.label, change=step.change, point=idx,
            center=point.centre(objective), ci95=point.evidence.ci95, n=point.n,
            vs_previous=change, vs_base=result(vs_base),
            alone=None if alone_of is None else Alone(
                alone_of[0], points[alone_of[0]].centre(objective), result(alone_of[1])),
            verdict=verdict,
            durability=[f"{name} = {step.change[name]}: {cost}" for name, cost
                        in safety.durability_costs(point.config).items()
                        if name in step.change],
            note=point.unavailable,
        ))
    # The last measured step against step 0 is the total: the same comparison, not a second
    # one in the family.
    total = next((r.vs_base for r in reversed(rows) if r.vs_base), None)
    return StepsTable(slice_values, rows, total, _interaction(rows, total), family_confidence)


def _tested_change(a: list[float], b: list[float], objective: Objective,
                   statistics: Statistics, confidence: float) -> stats.Change:
    """b against a, with the interval of the test that judges it (Welch's t on the log scale
    for times, on the values for "welch"): the ratio of geometric means (of means for "welch")
    and its t interval, so that an interval clear of zero at the family's level is what a
    Bonferroni test would call, and no interval shown beside "not shown" clears zero while its
    Holm-adjusted test does not. The bootstrap of stats.compare where the test gives no
    interval (a rank test, or a side with a single value)."""
    change = stats.compare(a, b, test=statistics.test, center=objective.centre,
                           confidence=confidence, seed=statistics.seed)
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    logs = statistics.test == "welch-log"
    if statistics.test not in ("welch", "welch-log") or xa.size < 2 or xb.size < 2 \
            or (logs and (np.any(xa <= 0) or np.any(xb <= 0))) or (not logs and xa.mean() <= 0):
        return change
    difference, low, high, _ = stats.welch(np.log(xa) if logs else xa,
                                           np.log(xb) if logs else xb, confidence)
    if logs:
        return stats.Change(math.exp(difference), math.exp(low), math.exp(high), change.p_raw)
    scale = float(xa.mean())  # a ratio of means is never below 0, whatever t allows
    return stats.Change(1.0 + difference / scale, max(0.0, 1.0 + low / scale),
                        1.0 + high / scale, change.p_raw)


def _step_verdict(change: Comparison, objective: Objective,
                  statistics: Statistics) -> StepVerdict:
    """A gain or a loss when the family's test decided the change and its interval shows it
    (knoblab.words.agrees); else no measurable effect (not shown either way, or the same)."""
    shown = words.finding_of(change.gain(objective.direction)[1], statistics.min_effect)
    if change.significant and _better(change, objective) and shown == Finding.HELPS:
        return StepVerdict.GAIN
    if change.significant and not _better(change, objective) and shown == Finding.HURTS:
        return StepVerdict.LOSS
    return StepVerdict.NO_EFFECT


def _interaction(rows: list[StepRow], total: Comparison | None) -> Interaction | None:
    """Effects that multiply independently give a total equal to the product of the effects
    alone; a gap is an interaction (e.g. a bigger log matters only once the buffer pool is
    big)."""
    measured = [r for r in rows[1:] if r.vs_base]
    if total is None or len(measured) < 2:
        return None
    # the first step alone is the first step on top of the base
    alone = [measured[0].vs_base, *(r.alone.vs_base if r.alone else None for r in measured[1:])]
    changes = [change for change in alone if change is not None]
    if len(changes) < len(alone):
        return None
    # Every interval of the table holds at once: the true product lies between the products
    # of the ends while the true total lies in its own interval.
    return Interaction(cumulative=total.ratio,
                       product_of_alone=float(np.prod([c.ratio for c in changes])),
                       cumulative_ci=total.ci95,
                       product_ci=(float(np.prod([c.ci95[0] for c in changes])),
                                   float(np.prod([c.ci95[1] for c in changes]))))


def _cumulative_step(point: Point) -> int | None:
    """The step of a point applied on top of the steps before it; None for any other point."""
    return point.step.number if point.step and point.step.role == StepRole.CUMULATIVE else None


def _level(summary: stats.Summary, objective: Objective) -> float:
    return summary.mean if objective.centre == "mean" else summary.median


def _servers_compared(points: list[Point], samples: dict[int, list[float]],
                      objective: Objective, statistics: Statistics,
                      levels: stats.Levels | None, blocks: dict[int, list[str]]
                      ) -> list[ServersCompared]:
    """The servers against each other, configuration by configuration: for a steps run at
    step 0 and at the last step (the article's final comparison of builds), for a sweep at
    every point."""
    configurations: dict[tuple[object, ...], list[int]] = defaultdict(list)
    for idx, point in enumerate(points):
        place = None if point.step is None else (point.step.role, point.step.number)
        same = tuple(sorted((k, v) for k, v in point.settings.items() if k != "binary"))
        configurations[(place, same)].append(idx)
    groups = list(configurations.values())
    numbers = [_cumulative_step(points[group[0]]) for group in groups]
    measured = [n for n in numbers if n is not None]
    if measured:
        groups = [g for g, n in zip(groups, numbers, strict=True) if n in (0, max(measured))]
    compared = []
    for group in groups:
        members = [i for i in group if not points[i].unavailable]
        if len(members) < 2:
            continue
        judgement = _judge(samples, members, objective, statistics, levels, blocks)
        first = points[members[0]]
        if first.step is not None:
            step = first.step
            at = f"step {step.number}: {step.label}" if step.number else step.label
        else:
            at = ", ".join(f"{k}={v}" for k, v in first.settings.items() if k != "binary")
        rows = [ServerRow(
            binary=points[idx].settings["binary"], point=idx,
            center=None if verdict.summary is None else _level(verdict.summary, objective),
            ci95=points[idx].evidence.ci95, n=points[idx].n,
            ratio_to_best=verdict.ratio_to_best, p_value=verdict.p_adjusted,
            # no run recommends a server: the one shown faster is the fastest measured
            verdict=words.leader_verdict(objective.direction)
            if verdict.verdict == PointVerdict.BEST else verdict.verdict,
        ) for idx, verdict in zip(members, judgement.verdicts, strict=True)]
        compared.append(ServersCompared(at=at, slice={}, rows=rows,
                                        significant=judgement.significant))
    return compared
