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
import statistics as pystatistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from knoblab import workloads
from knoblab.classes import ClassComparison
from knoblab.stats import Statistics
from knoblab.workloads.base import Objective, Steady

if TYPE_CHECKING:
    from knoblab.search.options import Goal
    from knoblab.search.space import Space

Settings = dict[str, str]  # knob (or sliced parameter) -> value
Interval = tuple[float, float]  # a 95% interval: (low, high)
JSON = dict[str, Any]
T = TypeVar("T")


def _json(value: Any) -> Any:
    if isinstance(value, _Record):
        return value.to_json()
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    return value


class _Record:
    """A record whose JSON is its fields, in order, under their own names."""

    __dataclass_fields__: ClassVar[dict[str, Any]]  # set by @dataclass on each record

    def to_json(self) -> JSON:
        return {f.name: _json(getattr(self, f.name)) for f in fields(self)}


def _optional(read: Callable[[Any], T], value: Any) -> T | None:
    return None if value is None else read(value)


def _inverse(x: float) -> float:
    return math.inf if x <= 0 else 1.0 / x


def _interval(value: Any) -> Interval | None:
    return None if value is None else (value[0], value[1])


# ----------------------------------------------------------------------------- points


@dataclass(frozen=True)
class Step(_Record):
    """Where a point of a steps run stands."""

    number: int  # 0: the base
    role: str  # "cumulative" (on top of the steps before) or "alone" (its change on the base)
    change: Settings  # what this step sets
    label: str  # "defaults", "+ innodb_buffer_pool_size=700M"

    def to_json(self) -> JSON:
        return {"step": self.number, "role": self.role, "change": self.change,
                "label": self.label}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Step:
        return cls(data["step"], data["role"], dict(data["change"]), data["label"])


@dataclass(frozen=True)
class TimedEvidence(_Record):
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
    # A replay at speed "original": how far behind the capture's schedule its statements
    # started, in seconds ("median", "p95": medians over the runs); None for any other run.
    behind: dict[str, float] | None = None

    def to_json(self) -> JSON:
        found = super().to_json()
        if self.behind is None:
            del found["behind"]  # only a replay at the original speed has a schedule
        return found

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TimedEvidence:
        return cls(data.get("median"), _interval(data.get("ci95")), data.get("mean"),
                   data.get("stdev"), list(data.get("samples") or []), data.get("regime"),
                   data.get("cpu_share"), data.get("iowait_share"), data.get("read_mb"),
                   dict(data.get("os") or {}),
                   dict(data["behind"]) if data.get("behind") else None)


@dataclass(frozen=True)
class SeriesRun(_Record):
    """One run of a time series: its throughput every second."""

    repetition: int
    status: str  # "done" or "failed" (what it managed before it failed)
    t: list[float]  # seconds since the start
    tps: list[float]
    steady: tuple[int, int] | None  # the steady state: indexes [start, end) into t and tps

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SeriesRun:
        steady = data.get("steady")
        return cls(data.get("repetition", 0), data.get("status", "done"),
                   list(data.get("t") or []), list(data.get("tps") or []),
                   None if steady is None else (steady[0], steady[1]))


@dataclass(frozen=True)
class OsRun(_Record):
    """The machine's CPU (shares of all cores) and disk (bytes) every second of one run."""

    repetition: int
    t: list[float]
    cpu_user: list[float | None]  # None: a second the figure was not read
    cpu_system: list[float | None]
    cpu_iowait: list[float | None]
    disk_read_bytes: list[float | None]
    disk_write_bytes: list[float | None]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OsRun:
        def values(key: str) -> list[Any]:
            return list(data.get(key) or [])

        return cls(data.get("repetition", 0), values("t"), values("cpu_user"),
                   values("cpu_system"), values("cpu_iowait"), values("disk_read_bytes"),
                   values("disk_write_bytes"))


@dataclass(frozen=True)
class SeriesEvidence(_Record):
    """The figures of a point measured as a time series (sysbench), on its steady state."""

    series: list[SeriesRun]
    os_series: list[OsRun]  # only when the OS was sampled every second
    samples: list[float]  # what the test compares: one mean per server start, or batch means
    regime: str | None
    compared: str | None  # "server starts" or "batch means of one start"; None: nothing measured
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

    def to_json(self) -> JSON:
        found = super().to_json()
        if self.compared is None:
            del found["compared"]  # nothing was measured: there are no samples to describe
        return found

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SeriesEvidence:
        return cls(
            [SeriesRun.from_json(s) for s in data.get("series") or []],
            [OsRun.from_json(s) for s in data.get("os_series") or []],
            list(data.get("samples") or []), data.get("regime"), data.get("compared"),
            data.get("mean"), data.get("median"), data.get("stdev"), data.get("cv"),
            _interval(data.get("ci95")), data.get("latency_p95_ms"), data.get("latency_p99_ms"),
            data.get("stall_seconds"), data.get("zero_seconds"), data.get("longest_stall"),
            data.get("sql_errors"), data.get("reconnects"))


Evidence = TimedEvidence | SeriesEvidence


def evidence_from_json(data: Mapping[str, Any], time_series: bool) -> Evidence:
    """A point's figures, as its kind gives them (`Workload.evidence`) or the JSON holds them."""
    return SeriesEvidence.from_json(data) if time_series else TimedEvidence.from_json(data)


@dataclass(frozen=True)
class Point(_Record):
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
    # "best" (the leader, when some point is shown worse), "equivalent", "worse",
    # "inconclusive", "failed" or "not run"; see stats.Verdict
    verdict: str
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
    def from_json(cls, data: Mapping[str, Any], time_series: bool) -> Point:
        return cls(
            dict(data["settings"]), dict(data.get("config") or {}),
            dict(data.get("effective") or {}), bool(data.get("is_default")), data.get("n", 0),
            data.get("failed", 0), data.get("ratio_to_best"), data.get("p_value"),
            data.get("p_equivalent"), data["verdict"], data.get("extra_rounds"),
            list(data.get("errors") or []), data.get("unavailable"),
            dict(data.get("durability") or {}),
            Step.from_json(data) if "step" in data else None,
            evidence_from_json(data, time_series))


# ----------------------------------------------------------------------------- conclusion


@dataclass(frozen=True)
class SliceConclusion(_Record):
    """The best point of one slice, and whether to change anything there.

    A change is recommended only when it is shown to help against the current configuration
    (the server's defaults): `finding` says what the fastest measured point showed against it
    (knoblab.words: "helps", "same", "unshown"; None when there is no change to judge: the
    default is the fastest measured, or nothing finished), `versus_current` the comparison
    it was judged on (the fastest measured over the current configuration)."""

    slice: Settings
    significant: bool  # some point is measurably worse than the best
    best: Settings | None  # None: every point failed
    recommended: Settings | None  # None: keep what is configured now
    fastest: Settings | None = None  # the fastest measured, whatever its verdict
    finding: str | None = None
    versus_current: Comparison | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SliceConclusion:
        return cls(dict(data.get("slice") or {}), bool(data.get("significant")),
                   data.get("best"), data.get("recommended"), data.get("fastest"),
                   data.get("finding"),
                   _optional(Comparison.from_json, data.get("versus_current")))


@dataclass(frozen=True)
class RecommendedSteps(_Record):
    """The settings of the steps that measurably helped, in one slice of a steps run."""

    slice: Settings
    settings: Settings

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RecommendedSteps:
        return cls(dict(data.get("slice") or {}), dict(data["settings"]))


@dataclass(frozen=True)
class Conclusion:
    """The verdict of a run in numbers; its sentence is the report's (conclusion_text)."""

    significant: bool
    best: Settings | None  # None when sliced: each slice has its own
    recommended: Settings | None
    by_slice: list[SliceConclusion] | None  # when sliced
    recommended_steps: list[RecommendedSteps] | None  # in a steps run
    # unsliced: what the fastest measured showed against the current configuration
    # (SliceConclusion's fields of the same names)
    fastest: Settings | None = None
    finding: str | None = None
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
            found["by_slice"] = _json(self.by_slice)
        else:
            found.update({"fastest": self.fastest, "finding": self.finding,
                          "versus_current": _json(self.versus_current)})
        if text is not None:
            found["text"] = text
        if self.recommended_steps is not None:
            found["recommended_steps"] = _json(self.recommended_steps)
        return found

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Conclusion:
        by_slice, steps = data.get("by_slice"), data.get("recommended_steps")
        return cls(bool(data.get("significant")), data.get("best"), data.get("recommended"),
                   None if by_slice is None else [SliceConclusion.from_json(s) for s in by_slice],
                   None if steps is None else [RecommendedSteps.from_json(s) for s in steps],
                   data.get("fastest"), data.get("finding"),
                   _optional(Comparison.from_json, data.get("versus_current")))


# ----------------------------------------------------------------------------- steps


@dataclass(frozen=True)
class Comparison(_Record):
    """One point against another: the ratio of their centres, its interval, and the verdict."""

    ratio: float
    ci95: Interval
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

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Comparison:
        return cls(data["ratio"], (data["ci95"][0], data["ci95"][1]), data["p_value"],
                   bool(data["significant"]))


@dataclass(frozen=True)
class Alone(_Record):
    """A step's change measured alone on the base."""

    point: int  # index into Results.points
    center: float | None
    vs_base: Comparison | None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Alone:
        return cls(data["point"], data.get("center"),
                   _optional(Comparison.from_json, data.get("vs_base")))


@dataclass(frozen=True)
class StepRow(_Record):
    """A step of a steps table: its level, its change, and what to do with it."""

    step: int
    label: str
    change: Settings
    point: int  # index into Results.points
    center: float | None  # None: not measured
    ci95: Interval | None
    n: int
    vs_previous: Comparison | None  # against the last measured step before it
    vs_base: Comparison | None
    alone: Alone | None
    verdict: str  # "base", "gain", "loss", "no measurable effect", "failed", "changes nothing"
    # (its values were already in force) or "unavailable" (not on this server)
    durability: list[str]  # "knob = value: what a crash can cost" of the step's own change
    note: str | None  # why it has no number

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepRow:
        return cls(
            data["step"], data.get("label") or "", dict(data.get("change") or {}),
            data["point"], data.get("center"), _interval(data.get("ci95")), data.get("n", 0),
            _optional(Comparison.from_json, data.get("vs_previous")),
            _optional(Comparison.from_json, data.get("vs_base")),
            _optional(Alone.from_json, data.get("alone")), data["verdict"],
            list(data.get("durability") or []), data.get("note"))


@dataclass(frozen=True)
class Interaction(_Record):
    """All steps together against the product of their changes measured alone."""

    cumulative: float
    product_of_alone: float

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Interaction:
        return cls(data["cumulative"], data["product_of_alone"])


@dataclass(frozen=True)
class StepsTable(_Record):
    """The steps of one slice, applied one on top of the other from the base."""

    slice: Settings
    rows: list[StepRow]
    total: Comparison | None  # the last measured step against the base
    interaction: Interaction | None
    # the level of its comparisons' intervals, which hold for the whole table at once
    # (None: results written before, with 95% intervals of each comparison alone)
    confidence: float | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepsTable:
        return cls(dict(data.get("slice") or {}),
                   [StepRow.from_json(r) for r in data.get("rows") or []],
                   _optional(Comparison.from_json, data.get("total")),
                   _optional(Interaction.from_json, data.get("interaction")),
                   data.get("confidence"))


# ----------------------------------------------------------------------------- servers


@dataclass(frozen=True)
class ServerInfo(_Record):
    """A server the run was measured on, or left out of it."""

    label: str  # "" when there is one
    binary: str | None  # None: a running server
    endpoint: str | None  # a running server's address
    version: str | None
    version_line: str | None
    compile: dict[str, str | None]  # what the build says of itself: os, machine, compiler …
    missing: list[str]  # settings it lacks: points using them were left out on it
    error: str | None  # why it was left out

    @property
    def compiler(self) -> str | None:
        return self.compile.get("compiler")

    def to_json(self) -> JSON:
        found = super().to_json()
        if self.endpoint is None:
            del found["endpoint"]  # only a running server has one
        return found

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ServerInfo:
        return cls(data.get("label") or "", data.get("binary"), data.get("endpoint"),
                   data.get("version"), data.get("version_line"),
                   dict(data.get("compile") or {}), list(data.get("missing") or []),
                   data.get("error"))


@dataclass(frozen=True)
class ServerRow(_Record):
    """One server's level at a configuration measured on every server."""

    binary: str  # the server's label
    point: int  # index into Results.points
    center: float | None
    ci95: Interval | None
    n: int
    ratio_to_best: float | None
    p_value: float | None
    verdict: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ServerRow:
        return cls(data["binary"], data["point"], data.get("center"),
                   _interval(data.get("ci95")), data.get("n", 0), data.get("ratio_to_best"),
                   data.get("p_value"), data["verdict"])


@dataclass(frozen=True)
class ServersCompared(_Record):
    """The servers against each other at one configuration."""

    at: str  # the configuration: "step 5: + innodb_log_buffer_size=4M", "read_buffer_size=1M"
    slice: Settings
    rows: list[ServerRow]
    significant: bool

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ServersCompared:
        return cls(data.get("at", "?"), dict(data.get("slice") or {}),
                   [ServerRow.from_json(r) for r in data.get("rows") or []],
                   bool(data.get("significant")))


# ----------------------------------------------------------------------------- evidence


@dataclass(frozen=True)
class ExplainingCounter(_Record):
    """A server counter that moved with the setting, consistently (knoblab.evidence)."""

    counter: str
    per_point: dict[str, float]  # median per measurement, by point label
    eta_squared: float
    spearman: float | None
    text: str  # knoblab.evidence.describe: "created_tmp_disk_tables: 1 per run at 1M, 0 at 64M"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExplainingCounter:
        return cls(data["counter"], dict(data.get("per_point") or {}),
                   data.get("eta_squared", 0.0), data.get("spearman"), data.get("text") or "")


@dataclass(frozen=True)
class Explanation(_Record):
    """The counters that explain one slice."""

    slice: Settings
    counters: list[ExplainingCounter]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Explanation:
        return cls(dict(data.get("slice") or {}),
                   [ExplainingCounter.from_json(c) for c in data.get("counters") or []])


def _explanations(entries: list[Mapping[str, Any]]) -> list[Explanation]:
    """Explanations per slice; a flat list of counters (results written before slicing) is
    one unsliced explanation."""
    flat = [ExplainingCounter.from_json(e) for e in entries if "counters" not in e]
    sliced = [Explanation.from_json(e) for e in entries if "counters" in e]
    return ([Explanation({}, flat)] if flat else []) + sliced


@dataclass(frozen=True)
class Noise(_Record):
    """How much identical timed runs on one server start differed: the machine's noise floor."""

    starts: int
    spread_median: float  # max / min - 1 of a start's runs, median over the starts
    spread_max: float

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Noise:
        return cls(data["starts"], data["spread_median"], data["spread_max"])


# ----------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class Rounds(_Record):
    """How often the points were measured, and for adaptive repetitions when and why the run
    stopped, with the p-values the last look's tests had to reach (sequential boundaries)."""

    done: int  # complete rounds (one measurement of every point each)
    adaptive: bool
    floor: int | None  # adaptive: at least, at most, within this budget (seconds)
    ceiling: int | None
    budget: float | None
    stopped: str | None  # "decided", "budget" or "ceiling"; None: fixed, or not finished
    level_worse: float | None  # adaptive: a difference needed p below this at the last look
    level_same: float | None  # ... and equivalence this
    design: str | None = None  # "blocked" or "restarts" (None: a run from before designs)
    design_why: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Rounds:
        return cls(data.get("done", 0), bool(data.get("adaptive")), data.get("floor"),
                   data.get("ceiling"), data.get("budget"), data.get("stopped"),
                   data.get("level_worse"), data.get("level_same"), data.get("design"),
                   data.get("design_why"))


@dataclass(frozen=True)
class Results:
    """A run's results: its points, verdicts and evidence."""

    run_id: str
    name: str
    kind: str  # the experiment: "sweep" or "steps" (a steps run has `steps`)
    status: str
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
        """The results JSON; `conclusion_text` is the report's sentence, put where the results
        JSON has always had it (conclusion.text)."""
        found: JSON = {
            "run_id": self.run_id, "name": self.name, "kind": self.kind, "status": self.status,
            "objective": {"metric": self.objective.metric,
                          "direction": self.objective.direction},
            "server": {"binary": self.server_binary, "version": self.server_version},
            "servers": _json(self.servers), "workload": self.workload, "dataset": self.dataset,
            "steady": None if self.steady is None else {
                "warmup": self.steady.warmup, "window": self.steady.window,
                "stall_fraction": self.steady.stall_fraction},
            "knobs": self.knobs, "slices": self.slices, "base": self.base,
            "regime": self.regime,
            "statistics": {"test": self.statistics.test, "alpha": self.statistics.alpha,
                           "min_effect": self.statistics.min_effect,
                           "confidence": self.statistics.confidence},
            "points": _json(self.points), "noise": _json(self.noise),
            "explained_by": _json(self.explained_by), "tied": self.tied,
            "warnings": self.warnings,
        }
        if self.rounds is not None:
            found["rounds"] = self.rounds.to_json()
        if self.steps is not None:
            found["steps"] = _json(self.steps)
        if self.servers_compared is not None:
            found["servers_compared"] = _json(self.servers_compared)
        if self.statement_classes is not None:
            found["statement_classes"] = self.statement_classes.to_json()
        found["conclusion"] = self.conclusion.to_json(conclusion_text)
        found["reproduce"] = {"machine": self.machine, "started_at": self.started_at,
                              "finished_at": self.finished_at, "spec": self.spec,
                              "knoblab_version": self.knoblab_version}
        return found

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Results:
        """Results from their JSON (conclusion.text, a sentence, is left out)."""
        workload = dict(data.get("workload") or {})
        objective = workloads.kind(workload.get("kind", "query")).objective
        server = data.get("server") or {}
        steady, statistics = data.get("steady"), data.get("statistics") or {}
        steps, compared = data.get("steps"), data.get("servers_compared")
        reproduce = data.get("reproduce") or {}
        return cls(
            run_id=data["run_id"], name=data["name"], kind=data.get("kind", "sweep"),
            status=data.get("status", "done"), objective=objective,
            server_binary=server.get("binary", ""), server_version=server.get("version"),
            servers=[ServerInfo.from_json(s) for s in data.get("servers") or []],
            workload=workload, dataset=dict(data.get("dataset") or {}),
            steady=None if steady is None else Steady(**steady),
            knobs=list(data.get("knobs") or []), slices=list(data.get("slices") or []),
            base=dict(data.get("base") or {}), regime=data.get("regime"),
            statistics=Statistics(**{k: statistics[k] for k in
                                     ("test", "alpha", "min_effect", "confidence")
                                     if k in statistics}),
            points=[Point.from_json(p, objective.time_series) for p in data["points"]],
            noise=_optional(Noise.from_json, data.get("noise")),
            explained_by=_explanations(data.get("explained_by") or []),
            tied=dict(data.get("tied") or {}), warnings=list(data.get("warnings") or []),
            steps=None if steps is None else [StepsTable.from_json(s) for s in steps],
            servers_compared=None if compared is None else [
                ServersCompared.from_json(s) for s in compared],
            conclusion=Conclusion.from_json(data.get("conclusion") or {}),
            rounds=_optional(Rounds.from_json, data.get("rounds")),
            machine=dict(reproduce.get("machine") or {}),
            started_at=reproduce.get("started_at"), finished_at=reproduce.get("finished_at"),
            spec=reproduce.get("spec") or "", knoblab_version=reproduce.get("knoblab_version")
            or "",
            statement_classes=_optional(ClassComparison.from_json,
                                        data.get("statement_classes")))


# --- a search (knoblab tune): what knoblab.search finds, and knoblab.report shows -------------


@dataclass(frozen=True)
class TrialOutcome:
    """One configuration of the search and what it scored against the baseline."""

    number: int
    config: dict[str, str]  # the searched settings, as the server takes them
    changes: dict[str, str]  # those that differ from the baseline
    state: str  # "scored", "baseline", "refused" (never run), "failed" (the server said no)
    score: float | None  # mean log-ratio to the baseline over blocks; lower is better
    ratios: list[float]  # per block
    runs: tuple[str, ...]  # its runs in the store: the first, then those of its extra rounds
    error: str | None = None
    observed: float | None = None  # the constrained metric, the candidate's median
    violation: float | None = None  # above 0: the constraint is violated (a log-ratio)

    @property
    def feasible(self) -> bool:
        """Scored, and within the constraint."""
        return self.state == "scored" and (self.violation or 0.0) <= 0.0

    @property
    def run_id(self) -> str | None:
        return self.runs[0] if self.runs else None

    @property
    def gain(self) -> float | None:
        """How much better than the baseline: +0.08 is 8% better (faster, or more tps)."""
        return None if self.score is None else math.expm1(-self.score)

    def interval(self, confidence: float = 0.95) -> tuple[float, float] | None:
        """The gain's interval from the spread of the per-block ratios (t-based)."""
        if len(self.ratios) < 2:
            return None
        from scipy import stats as sps

        spread = pystatistics.stdev(self.ratios) / math.sqrt(len(self.ratios))
        t = float(sps.t.ppf(0.5 + confidence / 2, len(self.ratios) - 1))
        mean = pystatistics.fmean(self.ratios)
        return math.expm1(-(mean + t * spread)), math.expm1(-(mean - t * spread))


@dataclass(frozen=True)
class Validation:
    """A candidate measured again against the baseline, in fresh starts, with adaptive rounds
    and the full statistics, at alpha shared among the candidates validated (Bonferroni)."""

    trial: TrialOutcome
    run_id: str
    verdict: str  # "better", "worse", "same" (within min_effect), "undecided", "violates"
    gain: float | None
    interval: tuple[float, float] | None
    rounds: int
    observed: float | None = None  # the constrained metric, the candidate's median
    # The level of `interval`: the one the verdict was decided at (alpha shared among the
    # candidates, and a sequential look's boundary), so that the interval shown says what the
    # verdict says.
    confidence: float = 0.95


@dataclass(frozen=True)
class Effect:
    """A setting of the recommendation put back to the baseline's value alone, the others
    kept: how much that loses (+0.05: the recommendation is 5% better with the setting)."""

    name: str
    loss: float
    interval: tuple[float, float]
    measurable: bool  # significant, and at least min_effect
    # the level of `interval`: the steps run's, whose intervals hold for all its settings at once
    confidence: float = 0.95


@dataclass(frozen=True)
class Reduction:
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
    # alone: the dropped settings put back cumulatively, the least helpful first (trim_run_id),
    # each with the verdict of the configuration once it too is put back; those put back in the
    # recommendation (trimmed).
    trimmed: tuple[str, ...] = ()
    trim_run_id: str | None = None
    trim_steps: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Importance:
    """One setting's share of what matters, by one of two bases: "ablation", its share of the
    gain the validated configuration's changes were measured to bring, each put back alone
    (low, high: from its measurement's 95% interval); "trials", its share of the objective's
    variation over the search's trials (fANOVA: a description of the search; low, high: 10th
    and 90th percentile over resamples)."""

    name: str
    share: float  # the shares of a space sum to about 1
    low: float
    high: float
    basis: str = "trials"


@dataclass(frozen=True)
class TuneResult:
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
    # (knoblab.search.recommend.claim says which figure a recommendation carries).
    confirmation: Validation | None = None

    @property
    def settings(self) -> dict[str, str]:
        """The settings recommended (knoblab.search.recommend says which, and why)."""
        from knoblab.search import recommend

        return recommend.settings(self)

    @property
    def recommended(self) -> Validation | None:
        """The validated candidate with the largest gain shown significant, if any is."""
        from knoblab.search import recommend

        return recommend.recommended(self.validations)
