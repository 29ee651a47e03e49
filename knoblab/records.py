"""The results of a run as typed records: what every report, chart and results JSON is made of.

Results hold numbers and verdicts, and what the server and the checks said in their own words
(errors, durability costs, warnings, counters); the sentences of a report are made from them by
knoblab.report. `Results.to_json()` is the results JSON users' scripts read (its keys, their
order and values are part of it); `Results.from_json()` reads one back. Results written by older
versions lack some keys: those read as empty or None, as the report has always taken them.
A search's findings (TuneResult: its trials, validations, reduction and importance) are records
here too: knoblab.search makes them, knoblab.report reads them without the search engine.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from knoblab.classes import ClassComparison
from knoblab.codec import JSON, OMITTED_WHEN_NONE, R, Record, decode, encode, json_key
from knoblab.judging import Centre, Direction, Statistics, Test
from knoblab.units import is_size, setting_text, size_or_count
from knoblab.vocabulary import (
    Experiment,
    Finding,
    OutcomeState,
    PointVerdict,
    RunStatus,
    StepRole,
    StepVerdict,
    TrialState,
    ValidationVerdict,
)

Settings = dict[str, str]  # knob (or sliced parameter) -> value
Interval = tuple[float, float]  # a 95% interval: (low, high)


def _inverse(x: float) -> float:
    return math.inf if x <= 0 else 1.0 / x


# ----------------------------------------------------------------------------- what is measured


@dataclass(frozen=True)
class Objective(Record):
    """What a measurement is and which way is better."""

    metric: str  # "seconds" or "tps"
    unit: str  # as shown after a value: "s" or "tps"
    direction: Direction
    centre: Centre  # what points are judged on: the median (times) or the mean (throughput)
    test: Test  # the default test: "welch-log" (times multiply) or "welch" (batch means)
    time_series: bool  # every second is stored: steady state, stalls, charts over time


@dataclass(frozen=True)
class Metric(Record):
    """A figure every measurement of a kind gives: what a search may optimize, or bound."""

    detail: str | None  # its key in the measurement's details; None: the measured value itself
    unit: str
    direction: Direction


@dataclass(frozen=True)
class Steady(Record):
    """How a time series' steady state is found: warm-up dropped, then (optionally) the last N s."""

    warmup: int | None = None  # seconds; None = detected (MSER-5)
    window: int | None = None  # the last N seconds; None = everything after the warm-up
    stall_fraction: float = 0.10  # a second below this fraction of the steady median is a stall


# ----------------------------------------------------------------------------- points


@dataclass(frozen=True)
class Step(Record):
    """Where a point of a steps run stands."""

    number: int = field(metadata={"json": "step"})  # 0: the base
    role: StepRole
    change: Settings  # what this step sets
    label: str  # "defaults", "+ innodb_buffer_pool_size=700M"


class _KindsOwn(Record):
    """A point's figures that its workload kind adds to the common ones (a replay's lag behind
    the capture's schedule), by name: written after the common ones, as keys of their own,
    and read back from whatever keys of a point no record names. Only the kind reads them
    (`Workload.notes`)."""

    own: dict[str, Any]

    def to_json(self) -> JSON:
        found = super().to_json()
        own = found.pop("own")
        return {**found, **own}

    @classmethod
    def from_json(cls: type[R], data: Mapping[str, Any]) -> R:
        named = {json_key(f) for f in fields(cls)}
        return typing.cast(R, decode(cls, {**data, "own": {
            k: v for k, v in data.items() if k not in named}}))


@dataclass(frozen=True)
class TimedEvidence(_KindsOwn):
    """The figures of a point measured as one time per run (query, script)."""

    median: float | None  # None: nothing was measured
    ci95: Interval | None  # of the median
    mean: float | None
    stdev: float | None
    samples: list[float]
    regime: str | None  # "CPU-bound", "I/O-bound" or "mixed"
    cpu_share: float | None  # the server's CPU time over the run's time
    iowait_share: float | None
    read_mb: float | None  # read from disk by the server, per run
    os: dict[str, float | None]  # the machine's figures per run (medians), by name
    own: dict[str, Any] = field(default_factory=dict)  # see _KindsOwn


@dataclass(frozen=True)
class SeriesRun(Record):
    """One run of a time series: its throughput every second."""

    repetition: int
    # done, or failed (what it managed before it failed)
    status: TrialState = field(metadata={"missing": TrialState.DONE})
    t: list[float]  # seconds since the start
    tps: list[float]
    steady: tuple[int, int] | None  # the steady state: indexes [start, end) into t and tps


@dataclass(frozen=True)
class OsRun(Record):
    """The machine's CPU (shares of all cores) and disk (bytes) every second of one run."""

    repetition: int
    t: list[float]
    cpu_user: list[float | None]  # None: a second the figure was not read
    cpu_system: list[float | None]
    cpu_iowait: list[float | None]
    disk_read_bytes: list[float | None]
    disk_write_bytes: list[float | None]


@dataclass(frozen=True)
class SeriesEvidence(_KindsOwn):
    """The figures of a point measured as a time series (sysbench), on its steady state."""

    series: list[SeriesRun]
    os_series: list[OsRun]  # only when the OS was sampled every second
    samples: list[float]  # what the test compares: one mean per server start, or batch means
    regime: str | None
    # "server starts" or "batch means of one start"; None (and no key): nothing measured
    compared: str | None = field(metadata=OMITTED_WHEN_NONE)
    mean: float | None
    median: float | None
    stdev: float | None  # of the seconds
    cv: float | None  # stdev / mean
    ci95: Interval | None  # of the mean
    latency_p95_ms: float | None
    latency_p99_ms: float | None
    stall_seconds: int | None  # seconds below the stall fraction of the steady median
    zero_seconds: int | None
    longest_stall: int | None
    sql_errors: int | None
    reconnects: int | None
    own: dict[str, Any] = field(default_factory=dict)  # see _KindsOwn


Evidence = TimedEvidence | SeriesEvidence


def evidence_from_json(data: Mapping[str, Any], time_series: bool) -> Evidence:
    """A point's figures, as its kind gives them (`Workload.evidence`) or the JSON holds them."""
    return SeriesEvidence.from_json(data) if time_series else TimedEvidence.from_json(data)


@dataclass(frozen=True)
class Point(Record):
    """One configuration: what was asked and applied, its verdict within its slice, its figures."""

    settings: Settings  # as requested: the swept values, slice values included
    config: Settings  # as set on the server (sizes in bytes, tied settings added)
    effective: Settings  # as the server applied them
    is_default: bool  # the server's defaults: what "keep it" refers to
    n: int  # measurements done
    failed: int
    ratio_to_best: float | None
    p_value: float | None  # Holm-adjusted, against the leader
    # TOST, Holm-adjusted: is it within ±min_effect of the leader (None: the leader, failed)
    p_equivalent: float | None
    verdict: PointVerdict  # see stats.Verdict
    extra_rounds: int | None  # inconclusive: about how many more rounds would decide it
    errors: list[str]
    unavailable: str | None  # why the point was not measured on its server
    durability: dict[str, str]  # knob -> what a crash can cost with this point's value
    step: Step | None  # in a steps run
    evidence: Evidence

    @property
    def timed(self) -> TimedEvidence | None:
        """The figures of a timed point; None for a time series."""
        return self.evidence if isinstance(self.evidence, TimedEvidence) else None

    @property
    def time_series(self) -> SeriesEvidence | None:
        """The figures of a time series; None for a timed point."""
        return self.evidence if isinstance(self.evidence, SeriesEvidence) else None

    def centre(self, objective: Objective) -> float | None:
        """The level the point is judged on: the median of times, the mean of throughput."""
        return self.evidence.mean if objective.centre == "mean" else self.evidence.median

    def to_json(self) -> JSON:
        own = {name: value for name, value in super().to_json().items()
               if name not in ("step", "evidence")}
        return {**own, **(self.step.to_json() if self.step else {}), **self.evidence.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], time_series: bool = False) -> Point:
        """`time_series`: the point's figures are a time series (the objective's)."""
        return cls(
            dict(data["settings"]), dict(data.get("config") or {}),
            dict(data.get("effective") or {}), bool(data.get("is_default")), data.get("n", 0),
            data.get("failed", 0), data.get("ratio_to_best"), data.get("p_value"),
            data.get("p_equivalent"), PointVerdict(data["verdict"]), data.get("extra_rounds"),
            list(data.get("errors") or []), data.get("unavailable"),
            dict(data.get("durability") or {}),
            Step.from_json(data) if "step" in data else None,
            evidence_from_json({k: v for k, v in data.items() if k not in _POINTS_OWN},
                               time_series))


# The keys of a point's JSON that are the point's (and its step's), not its figures'.
_POINTS_OWN = frozenset(json_key(f) for record in (Point, Step) for f in fields(record)
                        if f.name != "evidence")


# ----------------------------------------------------------------------------- conclusion


@dataclass(frozen=True)
class SliceConclusion(Record):
    """The best point of one slice, and whether to change anything there.

    A change is recommended only when it is shown to help against the current configuration
    (the server's defaults): `finding` says what the fastest measured point showed against it
    (it helps, is the same or is not shown either way; None when there is no change to
    judge: the default is the fastest measured, or nothing finished), `versus_current` the
    comparison it was judged on (the fastest measured over the current configuration)."""

    slice: Settings
    significant: bool  # some point is measurably worse than the best
    best: Settings | None  # the leader shown better than some point, when recommended
    recommended: Settings | None  # None: keep what is configured now
    fastest: Settings | None = None  # the fastest measured, whatever its verdict
    finding: Finding | None = None
    versus_current: Comparison | None = None


@dataclass(frozen=True)
class RecommendedSteps(Record):
    """The settings of the steps that measurably helped, in one slice of a steps run."""

    slice: Settings
    settings: Settings


@dataclass(frozen=True)
class Conclusion(Record):
    """The verdict of a run in numbers; its sentence is the report's (conclusion_text)."""

    significant: bool
    best: Settings | None  # None when sliced: each slice has its own
    recommended: Settings | None
    by_slice: list[SliceConclusion] | None  # when sliced
    recommended_steps: list[RecommendedSteps] | None  # in a steps run
    # unsliced: what the fastest measured showed against the current configuration
    # (SliceConclusion's fields of the same names)
    fastest: Settings | None = None
    finding: Finding | None = None
    versus_current: Comparison | None = None

    def of_slice(self, values: Mapping[str, str]) -> SliceConclusion:
        """The conclusion of the slice with `values` ({} unsliced)."""
        for part in self.by_slice or []:
            if part.slice == dict(values):
                return part
        return SliceConclusion(dict(values), self.significant, self.best, self.recommended,
                               self.fastest, self.finding, self.versus_current)

    def to_json(self, text: str | None = None) -> JSON:
        """`text`: the report's sentence, where the results JSON has always had it."""
        found: JSON = {"significant": self.significant, "best": self.best,
                       "recommended": self.recommended}
        if self.by_slice is not None:
            found["by_slice"] = encode(self.by_slice)
        else:
            found.update({"fastest": self.fastest, "finding": self.finding,
                          "versus_current": encode(self.versus_current)})
        if text is not None:
            found["text"] = text
        if self.recommended_steps is not None:
            found["recommended_steps"] = encode(self.recommended_steps)
        return found


# ----------------------------------------------------------------------------- steps


@dataclass(frozen=True)
class Comparison(Record):
    """One point against another: the ratio of their centres, its interval, and the verdict."""

    # the point's level over the reference's (the step before, step 0, the current
    # configuration), in a steps table of the test's means (geometric for times)
    ratio: float
    ci95: Interval  # at the table's confidence in a steps table, else [statistics] confidence
    p_value: float  # Holm-adjusted within its family
    significant: bool  # p below alpha and an effect of at least the minimum effect

    def gain(self, direction: str) -> tuple[float, Interval]:
        """The change as a gain (+0.05: 5% better than the reference, knoblab.words) with its
        interval: for a time, the reference's time over the new one, less 1."""
        if direction == "minimize":
            low, high = self.ci95
            return (_inverse(self.ratio) - 1.0,
                    (_inverse(high) - 1.0, _inverse(low) - 1.0))
        return self.ratio - 1.0, (self.ci95[0] - 1.0, self.ci95[1] - 1.0)


@dataclass(frozen=True)
class Alone(Record):
    """A step's change measured alone on the base."""

    point: int  # index into Results.points
    # its level: the median of times, the mean of throughput; None: not measured
    center: float | None
    vs_base: Comparison | None  # against step 0, in the table's family; None: step 0 not measured


@dataclass(frozen=True)
class StepRow(Record):
    """A step of a steps table: its level, its change, and what to do with it."""

    step: int  # its number; 0: the base
    label: str  # "defaults" or "base" (step 0), "+ innodb_buffer_pool_size=700M"
    change: Settings  # the settings this step adds ({} at step 0)
    point: int  # index into Results.points
    center: float | None  # None: not measured
    ci95: Interval | None  # of center, at [statistics] confidence; None: not measured
    n: int  # measurements done
    vs_previous: Comparison | None  # against the last measured step before it
    vs_base: Comparison | None  # against step 0; None: step 0 itself, or a side not measured
    # its change measured alone on the base; None: not measured so (step 1's is vs_base)
    alone: Alone | None
    # judged on vs_previous (Holm over the table, its interval agreeing); or why it has none
    verdict: StepVerdict
    durability: list[str]  # "knob = value: what a crash can cost" of the step's own change
    note: str | None  # why it has no number


@dataclass(frozen=True)
class Interaction(Record):
    """All steps together against the product of their changes measured alone."""

    cumulative: float  # the total: the last measured step's ratio to step 0
    # each change's ratio alone to step 0, multiplied (step 1's: its vs_base)
    product_of_alone: float
    # Their intervals, which hold together (the table's, Bonferroni): the total's, and the
    # product of the changes' alone (end by end); None in results stored before they were kept.
    cumulative_ci: Interval | None = None
    # the ends of the alone intervals multiplied; None in older results
    product_ci: Interval | None = None


@dataclass(frozen=True)
class StepsTable(Record):
    """The steps of one slice, applied one on top of the other from the base."""

    slice: Settings  # the slice's values ({} unsliced)
    rows: list[StepRow]  # its steps in order, step 0 (the base) first
    total: Comparison | None  # the last measured step against the base
    # None: fewer than two steps measured, or a change not measured alone
    interaction: Interaction | None
    # the level of its comparisons' intervals, which hold for the whole table at once
    # (None: results written before, with 95% intervals of each comparison alone)
    confidence: float | None = None

    def helped(self) -> Settings:
        """The settings of the steps that measurably helped; the others are left out."""
        return {k: v for row in self.rows if row.verdict == StepVerdict.GAIN
                for k, v in row.change.items()}


# ----------------------------------------------------------------------------- servers


@dataclass(frozen=True)
class ServerInfo(Record):
    """A server the run was measured on, or left out of it."""

    label: str  # "" when there is one
    binary: str | None  # None: a running server
    endpoint: str | None = field(metadata=OMITTED_WHEN_NONE)  # a running server's address
    version: str | None  # as the server says it ("10.11.19-MariaDB-0+deb12u1"); None: left out
    # its --version line in full (a running server: VERSION()); None: left out, or an old run
    version_line: str | None
    compile: dict[str, str | None]  # what the build says of itself: os, machine, compiler …
    missing: list[str]  # settings it lacks: points using them were left out on it
    error: str | None  # why it was left out
    allocator: str | None = None  # the allocator preloaded (None: the build's own malloc)
    preload: str | None = None  # its library's path

    @property
    def compiler(self) -> str | None:
        return self.compile.get("compiler")


@dataclass(frozen=True)
class ServerRow(Record):
    """One server's level at a configuration measured on every server."""

    binary: str  # the server's label
    point: int  # index into Results.points
    # its level: the median of times, the mean of throughput; None: nothing measured
    center: float | None
    ci95: Interval | None  # of center, at [statistics] confidence; None: nothing measured
    n: int  # measurements done
    # center / the leader's among the servers here (1: the leader); None: failed
    ratio_to_best: float | None
    p_value: float | None  # Holm-adjusted, against the leader (None: the leader, or failed)
    # against the leader, as a point's; "fastest measured" (or highest) in place of "best"
    verdict: PointVerdict


@dataclass(frozen=True)
class ServersCompared(Record):
    """The servers against each other at one configuration."""

    # the configuration: "step 5: + innodb_log_buffer_size=4M", "read_buffer_size=1M"
    at: str = field(metadata={"missing": "?"})
    slice: Settings  # written empty ({}): `at` names the configuration
    rows: list[ServerRow]  # one per server, those the configuration is unavailable on left out
    significant: bool  # some server is shown worse than the leader here


# ----------------------------------------------------------------------------- evidence


@dataclass(frozen=True)
class ExplainingCounter(Record):
    """A server counter that moved with the setting, consistently (knoblab.evidence)."""

    counter: str
    per_point: dict[str, float]  # median per measurement, by point label
    eta_squared: float
    spearman: float | None
    text: str  # knoblab.evidence.describe: "created_tmp_disk_tables: 1 per run at 1M, 0 at 64M"


@dataclass(frozen=True)
class Explanation(Record):
    """The counters that explain one slice."""

    slice: Settings
    counters: list[ExplainingCounter]


def _explanations(entries: Sequence[Mapping[str, Any]]) -> list[Explanation]:
    """Explanations per slice; a flat list of counters (results written before slicing) is
    one unsliced explanation."""
    flat = [ExplainingCounter.from_json(e) for e in entries if "counters" not in e]
    sliced = [Explanation.from_json(e) for e in entries if "counters" in e]
    return ([Explanation({}, flat)] if flat else []) + sliced


@dataclass(frozen=True)
class Noise(Record):
    """How much identical timed runs on one server start differed: the machine's noise floor."""

    # measurements of two timed runs or more ([workload] timed_runs): what the spreads are over
    starts: int
    spread_median: float  # max / min - 1 of a start's runs, median over the starts
    spread_max: float  # max / min - 1 of a start's runs, the largest over the starts


# ----------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class Rounds(Record):
    """How often the points were measured, and for adaptive repetitions when and why the run
    stopped, with the p-values the last look's tests had to reach (sequential boundaries)."""

    done: int  # complete rounds (one measurement of every point each)
    adaptive: bool  # true: repetitions = "auto" (rounds until decided); false: a fixed number
    floor: int | None  # adaptive: at least, at most, within this budget (seconds)
    ceiling: int | None  # adaptive: the most rounds ([workload] max_repetitions); None: fixed
    # adaptive: seconds of wall time, server starts included; None: fixed, or none set
    budget: float | None
    # "decided", "budget", "ceiling" or "futile" (runner.loop._look); None: fixed, or not finished
    stopped: str | None
    level_worse: float | None  # adaptive: a difference needed p below this at the last look
    level_same: float | None  # ... and equivalence this
    design: str | None = None  # "blocked" or "restarts" (None: a run from before designs)
    design_why: str | None = None  # why that design, in words; None: a run from before designs


@dataclass(frozen=True)
class Results:
    """A run's results: its points, verdicts and evidence."""

    run_id: str
    name: str
    experiment: Experiment  # sweep or steps (a steps run has `steps`); "kind" in JSON
    status: RunStatus
    objective: Objective  # the workload kind's
    server_binary: str
    server_version: str | None
    servers: list[ServerInfo]
    workload: dict[str, Any]  # as the workload kind describes itself (kind, sql, threads …)
    dataset: dict[str, Any]  # as the workload kind describes its data
    steady: Steady | None  # how a time series' steady state was found
    knobs: list[str]  # the swept names, sliced parameters included
    slices: list[str]  # the names points are compared within: binary, threads, rows …
    base: Settings  # [server.config]
    regime: str | None  # of every timed point, or "mixed"
    statistics: Statistics  # its seed is not in the results JSON
    points: list[Point]
    noise: Noise | None
    explained_by: list[Explanation]
    tied: dict[str, str]  # follower -> the knob whose value it is set to
    warnings: list[str]
    steps: list[StepsTable] | None  # a steps run's tables, one per slice
    servers_compared: list[ServersCompared] | None  # when several servers were measured
    conclusion: Conclusion
    rounds: Rounds | None = None  # None in results JSON written before rounds were kept
    # Reproducibility: the machine (knoblab.machine.describe), when the run began and ended
    # (epoch seconds), the spec as written, knoblab's version. Empty in older results JSON.
    machine: dict[str, str] = field(default_factory=dict)
    started_at: float | None = None
    finished_at: float | None = None
    spec: str = ""
    knoblab_version: str = ""
    # A replayed log's statement classes against the reference configuration (knoblab.classes)
    statement_classes: ClassComparison | None = None

    def server(self, label: str) -> ServerInfo | None:
        return next((s for s in self.servers if s.label == label), None)

    def to_json(self, conclusion_text: str | None = None) -> JSON:
        """The results JSON (`ResultsJSON`); `conclusion_text` is the report's sentence, put
        where the results JSON has always had it (conclusion.text)."""
        judged = self.statistics
        return ResultsJSON(
            run_id=self.run_id, name=self.name, kind=self.experiment, status=self.status,
            objective=ObjectiveNamed(self.objective.metric, self.objective.direction),
            server=Build(self.server_binary, self.server_version), servers=self.servers,
            workload=self.workload, dataset=self.dataset, steady=self.steady,
            knobs=self.knobs, slices=self.slices, base=self.base, regime=self.regime,
            statistics=Judged(judged.test, judged.alpha, judged.min_effect, judged.confidence),
            points=[p.to_json() for p in self.points], noise=self.noise,
            explained_by=encode(self.explained_by), tied=self.tied, warnings=self.warnings,
            rounds=self.rounds, steps=self.steps, servers_compared=self.servers_compared,
            statement_classes=self.statement_classes,
            conclusion=self.conclusion.to_json(conclusion_text),
            reproduce=Reproduce(self.machine, self.started_at, self.finished_at, self.spec,
                                self.knoblab_version)).to_json()

    @classmethod
    def from_json(cls, data: Mapping[str, Any], objective: Objective) -> Results:
        """Results from their JSON (conclusion.text, a sentence, is left out); `objective`:
        that of the workload kind that measured them (the JSON keeps its metric alone)."""
        doc = ResultsJSON.from_json(data)
        judged, reproduce = doc.statistics, doc.reproduce
        return cls(
            run_id=doc.run_id, name=doc.name, experiment=doc.kind, status=doc.status,
            objective=objective, server_binary=doc.server.binary,
            server_version=doc.server.version, servers=doc.servers, workload=doc.workload,
            dataset=doc.dataset, steady=doc.steady, knobs=doc.knobs, slices=doc.slices,
            base=doc.base, regime=doc.regime,
            statistics=Statistics(judged.min_effect, judged.alpha, judged.confidence,
                                  judged.test),
            points=[Point.from_json(p, objective.time_series) for p in doc.points],
            noise=doc.noise, explained_by=_explanations(doc.explained_by), tied=doc.tied,
            warnings=doc.warnings, steps=doc.steps, servers_compared=doc.servers_compared,
            conclusion=Conclusion.from_json(doc.conclusion), rounds=doc.rounds,
            machine=reproduce.machine, started_at=reproduce.started_at,
            finished_at=reproduce.finished_at, spec=reproduce.spec,
            knoblab_version=reproduce.knoblab_version,
            statement_classes=doc.statement_classes)


# ----------------------------------------------------------------------------- result.json


@dataclass(frozen=True)
class ObjectiveNamed(Record):
    """What result.json says of the objective (the kind's own holds the rest)."""

    metric: str = ""  # "seconds" (query, script, replay) or "tps" (sysbench)
    direction: Direction = "minimize"  # which way is better: "minimize" (times) or "maximize" (tps)


@dataclass(frozen=True)
class Build(Record):
    """The server binary a run measured, and the version it said."""

    binary: str = ""  # each server's binary (a running server: its address), comma-separated
    # the servers' versions, comma-separated, each once; None: not recorded
    version: str | None = None


@dataclass(frozen=True)
class Judged(Record):
    """How the run was judged, as result.json gives it (not the seed)."""

    test: Test = Statistics.test  # the test that judged each difference ([statistics] test)
    # the chance of a false "worse" or "equivalent" over the whole run
    alpha: float = Statistics.alpha
    # a fraction (0.03: 3%): smaller differences are never "worse"; within ±min_effect of the best
    # is "equivalent"
    min_effect: float = Statistics.min_effect
    # the level of the points' intervals (0.95: 95%); a steps table's hold at it for the whole
    # table at once
    confidence: float = Statistics.confidence


@dataclass(frozen=True)
class Reproduce(Record):
    """What a run needs to be made again: the machine (knoblab.machine.describe), when it
    began and ended (epoch seconds), the spec as written, knoblab's version."""

    # the machine it ran on, by name: cpu, cores, memory, disk, kernel …
    machine: dict[str, str] = field(default_factory=dict)
    started_at: float | None = None  # when it began, in epoch seconds
    finished_at: float | None = None  # when it ended, in epoch seconds; None: still running
    spec: str = ""  # the spec's text, as written
    knoblab_version: str = ""  # the knoblab that ran it


@dataclass(frozen=True)
class ResultsJSON(Record):
    """result.json, key by key and in order: the document users' scripts read. Its points and
    conclusion are held as their JSON (a point's figures are read as its kind's objective
    says; the conclusion carries the report's sentence)."""

    run_id: str  # the run's id in the store
    name: str  # the spec's name
    kind: Experiment = Experiment.SWEEP  # what the run was
    status: RunStatus = RunStatus.DONE  # how it ended (or that it runs)
    objective: ObjectiveNamed = ObjectiveNamed()  # what was measured; which way is better
    server: Build = Build()  # the binary measured, and its version
    servers: list[ServerInfo] = field(default_factory=list)  # each server, or why left out
    workload: dict[str, Any] = field(default_factory=dict)  # the workload, as its kind describes it
    dataset: dict[str, Any] = field(default_factory=dict)  # the data it ran on
    steady: Steady | None = None  # a time series' steady state: how it was found
    knobs: list[str] = field(default_factory=list)  # the settings swept
    slices: list[str] = field(default_factory=list)  # variants judged apart (rows, engine)
    base: Settings = field(default_factory=dict)  # settings in force at every point
    regime: str | None = None  # CPU-bound, I/O-bound, waiting or mixed
    statistics: Judged = Judged()  # how comparisons were judged
    # each configuration: its settings, figures and verdict
    points: list[JSON] = field(default_factory=list)
    noise: Noise | None = None  # how much repeated measurements spread
    explained_by: list[JSON] = field(default_factory=list)  # counters that moved with the values
    tied: Settings = field(default_factory=dict)  # follower setting: its leader
    warnings: list[str] = field(default_factory=list)  # what the run warned of, in words
    # adaptive rounds: how many, and why they stopped
    rounds: Rounds | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # a steps study's tables
    steps: list[StepsTable] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # several servers, compared point by point
    servers_compared: list[ServersCompared] | None = field(default=None,
                                                           metadata=OMITTED_WHEN_NONE)
    # a replay's statement classes, compared
    statement_classes: ClassComparison | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    conclusion: JSON = field(default_factory=dict)  # the answer, with the report's sentence
    reproduce: Reproduce = Reproduce()  # the command that runs it again


# --- a search (knoblab tune): what knoblab.search finds, and knoblab.report shows -------------


@dataclass(frozen=True)
class Dimension(Record):
    """One setting of the search: a whole-number range, or a list of choices."""

    name: str
    low: int | None = None  # ranges: bounds as the server takes them, on the block size
    high: int | None = None
    step: int = 1  # the server's block size (values are multiples of it)
    log: bool = True
    choices: tuple[str, ...] = ()  # choices: values as the server's config takes them

    def describe(self) -> str:
        if self.choices:
            return f"{self.name}: one of " + \
                ", ".join(setting_text(self.name, c) for c in self.choices)
        assert self.low is not None and self.high is not None
        scale = "log scale" if self.log else "linear"
        shown = size_or_count if is_size(self.name) else str
        return f"{self.name}: {shown(self.low)} to {shown(self.high)} ({scale})"

    def value(self, raw: int | str) -> str:
        """A sampled value as the server's config takes it (ranges: a multiple of the step)."""
        if self.choices:
            return str(raw)
        assert self.low is not None and self.high is not None
        number = int(raw)
        step = self.step
        if self.log and is_size(self.name) and number > 0 and step & (step - 1) == 0:
            # Sizes on a log scale to a quarter of their power of two (4M, 5M, 6M, 7M, 8M,
            # 10M ...): values people write, and no search over sizes 1% apart that no
            # measurement can tell apart.
            step = max(step, 1 << max(0, number.bit_length() - 3))
        # On the block size counted from the low end; a quarter power of two from 0.
        origin = 0 if step > self.step else self.low
        number = origin + round((number - origin) / step) * step
        return str(min(max(number, self.low), self.high))


@dataclass(frozen=True)
class Space(Record):
    dimensions: tuple[Dimension, ...]

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.dimensions]

    def config(self, params: Mapping[str, int | str]) -> dict[str, str]:
        """The configuration a set of sampled parameters stands for."""
        return {d.name: d.value(params[d.name]) for d in self.dimensions}

    def distributions(self) -> dict[str, Any]:
        """Optuna's distributions of the dimensions (log ranges step 1: Optuna allows no
        other; values are put on the block size afterwards, by `config`)."""
        from optuna.distributions import CategoricalDistribution, IntDistribution

        found: dict[str, Any] = {}
        for d in self.dimensions:
            if d.choices:
                found[d.name] = CategoricalDistribution(list(d.choices))
            else:
                assert d.low is not None and d.high is not None
                found[d.name] = IntDistribution(d.low, d.high, log=d.log,
                                                step=1 if d.log else d.step)
        return found


@dataclass(frozen=True)
class Constraint(Record):
    """A bound on a second metric: `constraint = { metric = "p99", max = 20 }` (its unit)."""

    metric: str
    limit: float
    upper: bool  # max (the metric must stay at or below the limit); else min

    def violation(self, observed: float) -> float:
        """Above 0 when violated (by how much, as a log-ratio), as Optuna's constraints are."""
        ratio = math.log(observed / self.limit)
        return ratio if self.upper else -ratio

    def describe(self, unit: str) -> str:
        return f"{self.metric} {'≤' if self.upper else '≥'} {self.limit:g} {unit}"


@dataclass(frozen=True)
class Goal(Record):
    """What the search lowers (the objective, as a log-ratio to the baseline) and the bound it
    must respect (a constraint on a second metric)."""

    name: str
    metric: Metric
    primary: bool  # the workload's own objective: the verdicts of its runs judge it
    constraint: Constraint | None = None
    bounded: Metric | None = None  # the constraint's metric

    @property
    def sign(self) -> float:
        """Log-ratios times this are lower when better, whichever way the metric goes."""
        return 1.0 if self.metric.direction == "minimize" else -1.0




@dataclass(frozen=True)
class TrialOutcome(Record):
    """One configuration of the search and what it scored against the baseline."""

    number: int
    config: dict[str, str]  # the searched settings, as the server takes them
    changes: dict[str, str]  # those that differ from the baseline
    state: OutcomeState
    score: float | None  # mean log-ratio to the baseline over blocks; lower is better
    ratios: list[float]  # per block
    runs: tuple[str, ...]  # its runs in the store: the first, then those of its extra rounds
    error: str | None = None
    observed: float | None = None  # the constrained metric, the candidate's median
    violation: float | None = None  # above 0: the constraint is violated (a log-ratio)
    # What its ratios (and score) were measured on: None for the whole workload, else the part
    # of it that screened the candidate ([tune] screen), in words; and how many measurements
    # screened it (on that part) before those.
    fidelity: str | None = None
    screened: int = 0

    @property
    def measured(self) -> bool:
        """Measured against the baseline: in full, or until the pruner stopped it."""
        return self.state in (OutcomeState.SCORED, OutcomeState.PRUNED)

    @property
    def feasible(self) -> bool:
        """Scored, and within the constraint."""
        return self.state == OutcomeState.SCORED and (self.violation or 0.0) <= 0.0

    @property
    def run_id(self) -> str | None:
        return self.runs[0] if self.runs else None

    @property
    def gain(self) -> float | None:
        """How much better than the baseline: +0.08 is 8% better (faster, or more tps)."""
        return None if self.score is None else math.expm1(-self.score)

    def interval(self, confidence: float = 0.95) -> tuple[float, float] | None:
        """The gain's interval from the spread of the per-block ratios (t-based), widened
        where neighbouring blocks are alike (drift between minutes: stats.drifting_mean_
        interval)."""
        if len(self.ratios) < 2:
            return None
        from knoblab.stats import drifting_mean_interval

        mean, half = drifting_mean_interval(self.ratios, confidence)
        return math.expm1(-(mean + half)), math.expm1(-(mean - half))


@dataclass(frozen=True)
class Validation(Record):
    """A candidate measured again against the baseline, in fresh starts, with adaptive rounds
    and the full statistics, at alpha shared among the candidates validated (Bonferroni)."""

    trial: TrialOutcome
    run_id: str
    verdict: ValidationVerdict
    gain: float | None
    ci95: tuple[float, float] | None  # at `confidence`, 0.95 or more
    rounds: int
    observed: float | None = None  # the constrained metric, the candidate's median
    # The level of `ci95`: the one the verdict was decided at (alpha shared among the
    # candidates, and a sequential look's boundary), so that the interval shown says what the
    # verdict says.
    confidence: float = 0.95
    # Cores other programs kept busy, on the average, while it was measured (the last of its
    # runs, when one beside other load was measured again); None: not measured.
    others_load: float | None = None


@dataclass(frozen=True)
class Effect(Record):
    """A setting of the recommendation put back to the baseline's value alone, the others
    kept: how much that loses (+0.05: the recommendation is 5% better with the setting)."""

    name: str
    loss: float
    ci95: tuple[float, float]  # at `confidence`
    measurable: bool  # significant, and at least min_effect
    # the level of `ci95`: the steps run's, whose intervals hold for all its settings at once
    confidence: float = 0.95


@dataclass(frozen=True)
class Reduction(Record):
    """The recommendation without its settings of no measurable effect, checked to be
    equivalent to the full one."""

    effects: list[Effect]
    run_id: str  # the run that measured each setting put back alone
    # The searched settings recommended in the end: those of measurable effect, unless the
    # full configuration was shown better than them (then all of it).
    kept: dict[str, str]
    check_run_id: str | None  # the run that compared the reduced with the full configuration
    equivalent: bool | None  # None: nothing to check (nothing dropped, or nothing kept)
    # When the full configuration did better than the reduced one, or no setting showed
    # alone: the dropped settings put back cumulatively, the least important first (trim_run_id),
    # each with the verdict of the configuration once it too is put back; those put back in the
    # recommendation (trimmed).
    trimmed: tuple[str, ...] = ()
    trim_run_id: str | None = None
    trim_steps: tuple[tuple[str, PointVerdict], ...] = ()
    # Put back in groups (knoblab.search.proof.halve): each step of trim_steps names several
    # settings, the least important first by the search's trials; no setting alone (effects).
    grouped: bool = False
    # What the chain kept without ever putting it back (proof.never_put_back), put back
    # together from the configuration it chose (rest_run_id), and that configuration's verdict
    # without them: worse, and they stay; else they go back too (in trimmed).
    rest: tuple[str, ...] = ()
    rest_run_id: str | None = None
    rest_verdict: PointVerdict | None = None
    # What the reduction chose (its `kept` before), when its confirmation against the
    # baseline did not show it better: the validated candidate is then recommended whole.
    unconfirmed: dict[str, str] | None = None


@dataclass(frozen=True)
class Importance(Record):
    """One setting's share of what matters, by one of two bases: "ablation", its share of the
    gain the validated configuration's changes were measured to bring, each put back alone
    (low, high: from its measurement's interval, at its Effect's confidence); "trials", its
    share of the objective's variation over the search's trials (fANOVA: a description of the
    search; low, high: 10th and 90th percentile over resamples)."""

    name: str
    share: float  # the shares of a space sum to about 1
    low: float
    high: float
    basis: str = "trials"


@dataclass(frozen=True)
class TuneResult(Record):
    study: str
    space: Space
    baseline: dict[str, str]
    trials: list[TrialOutcome]
    spent: float
    stopped: str  # "trials", "budget", "space" (every configuration measured)
    validations: list[Validation]
    min_effect: float
    importance: list[Importance] = field(default_factory=list)
    reduction: Reduction | None = None
    goal: Goal | None = None
    server: str = ""  # the version of the server tuned
    base: dict[str, str] = field(default_factory=dict)  # [server.config], as the server takes it
    tied: dict[str, str] = field(default_factory=dict)  # [tie]: follower -> leader
    # When what is recommended is not the validated candidate (the reduction dropped some of
    # its settings): that configuration measured against the baseline in a run of its own, or
    # the validation of another candidate that was exactly it; None when it was not measured
    # (knoblab.recommend.claim says which figure a recommendation carries).
    confirmation: Validation | None = None

    @property
    def recommended(self) -> Validation | None:
        """The validated candidate with the largest gain shown significant, if any is
        (knoblab.recommend says which of its settings are recommended, and why)."""
        return best_shown(self.validations)


def best_shown(validations: list[Validation]) -> Validation | None:
    """The validated candidate with the largest gain shown significant, if any is."""
    better = [v for v in validations if v.verdict == ValidationVerdict.BETTER]
    return max(better, key=lambda v: v.gain or 0.0, default=None)
