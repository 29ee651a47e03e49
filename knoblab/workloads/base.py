"""The Workload protocol: what every kind of workload (query, sysbench, script, replay) provides.

A kind owns its [workload] section (read and checked once, with its own errors), says which
data a point runs on (a `knoblab.datasets.Dataset`: [dataset] read through the dataset
registry, or data of its own), measures one configuration on a server, and gives its
objective (metric, unit, direction), how many connections it opens, how its stored trials are
summarised, and how it describes itself. `Workload`'s abstract members are what every kind
gives; its other members are capabilities with defaults (a measurement in parts, a time
series, checks against the server), overridden by the kinds that have them. The runner,
results and reports use only this protocol; adding a kind is one module and one line in the
registry (`knoblab.workloads.KINDS`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from knoblab.catalog import Catalog
from knoblab.connection import Server
from knoblab.datasets import Dataset
from knoblab.errors import UserError
from knoblab.keys import Key, Keys
from knoblab.records import Evidence, Metric, Objective, Steady
from knoblab.seconds import Second
from knoblab.stats import Summary
from knoblab.units import parse_duration
from knoblab.vocabulary import Design

# A line under a sweep's table, and whether it is a warning: what a kind says of its figures.
Note = tuple[str, bool]


class WorkloadError(UserError):
    """The measurement itself failed (SQL error, timeout, a dead server): the trial is recorded
    as failed and the run goes on."""


@dataclass(frozen=True)
class Rounds:
    """How many times each point is measured: a fixed number of rounds, or ("auto") as many
    as its comparisons need — at least `floor`, at most `ceiling`, within `budget` seconds of
    measuring (all sessions of the run together). One round measures every point once."""

    fixed: int | None = None  # None: "auto"
    floor: int = 3
    ceiling: int = 20
    budget: float | None = None
    # "blocked": one server start per round measures every point of it, the settings changed
    # in place; "restarts": a start per measurement; "auto": blocked where that is possible.
    design: str = "auto"
    # How the looks of an adaptive run share alpha (stats.sequential_levels); kept with the
    # run so that its report judges it as it was judged when it ran.
    spending: str = "pocock"
    # Seconds a measurement is expected to take, start included, where measurements before
    # tell (a tune's checks): a budget the floor rounds cannot hold is refused before a run.
    expected: float | None = None

    KEYS: ClassVar[Keys] = Keys(
        Key("repetitions", "Rounds of measurement, each measuring every point once: a fixed "
            "number, or \"auto\": round after round until every comparison is decided, the "
            "budget would be overrun, or the rounds left could not decide.",
            "\"auto\" or a whole number", "\"auto\"", 1, 10_000),
        Key("min_repetitions", "With repetitions = \"auto\": the rounds measured before the "
            "first judgement.", "a whole number", "3", 2, 10_000),
        Key("max_repetitions", "With repetitions = \"auto\": the most rounds measured.",
            "a whole number", "20", 2, 10_000),
        Key("budget", "With repetitions = \"auto\": the run stops before a round that would "
            "not fit in this wall time (server starts included); knoblab resume RUN --budget "
            "extends it.", "a duration (\"15m\")"),
        Key("design", "How rounds use server starts: \"blocked\" measures every point of a "
            "round on one start, the settings changed in place; \"restarts\" starts a server "
            "for each measurement; \"auto\" is blocked wherever that is possible.",
            "text", "\"auto\"", choices=("auto", "blocked", "restarts")))
    DESIGNS: ClassVar[tuple[str, ...]] = ("auto", *Design)

    @property
    def adaptive(self) -> bool:
        return self.fixed is None

    @property
    def most(self) -> int:
        """The rounds planned: all of them when fixed, the ceiling when adaptive."""
        return self.fixed if self.fixed is not None else self.ceiling

    def describe(self) -> dict[str, Any]:
        """As kept in a run's description (RunInfo.workload) and read back by from_info."""
        if self.fixed is not None:
            return {"repetitions": self.fixed, "design": self.design}
        return {"repetitions": "auto", "min_repetitions": self.floor,
                "max_repetitions": self.ceiling, "budget": self.budget, "design": self.design,
                "spending": self.spending}

    @classmethod
    def from_info(cls, workload: Mapping[str, Any]) -> Rounds:
        repetitions = workload.get("repetitions", 5)
        design = workload.get("design", Design.RESTARTS)  # runs before designs: a start each
        if repetitions != "auto":
            return cls(fixed=int(repetitions), design=design)
        return cls(None, int(workload["min_repetitions"]), int(workload["max_repetitions"]),
                   workload.get("budget"), design,
                   workload.get("spending", "obf"))  # the only one before it was kept

    @classmethod
    def from_spec(cls, section: Mapping[str, Any]) -> Rounds:
        """[workload] repetitions (a number, or "auto", the default), min_repetitions,
        max_repetitions and budget; one clear line for anything wrong."""
        design = section.get("design", "auto")
        if design not in cls.DESIGNS:
            raise UserError(f"[workload] design = {design!r}: use \"auto\" (blocked where "
                            "possible), \"blocked\" or \"restarts\"")
        repetitions = section.get("repetitions", "auto")
        adaptive_keys = [k for k in ("min_repetitions", "max_repetitions", "budget")
                         if k in section]
        if repetitions != "auto":
            if isinstance(repetitions, bool) or not isinstance(repetitions, int) \
                    or not 1 <= repetitions <= 10_000:
                raise UserError(f"[workload] repetitions = {repetitions!r}: must be \"auto\" "
                                "or a whole number from 1 to 10000")
            if adaptive_keys:
                raise UserError(f"[workload] {adaptive_keys[0]} applies only to repetitions = "
                                f"\"auto\"; remove it, or set repetitions = \"auto\"")
            return cls(fixed=repetitions, design=design)
        floor = _whole(section, "min_repetitions", cls.floor, 2)
        ceiling = _whole(section, "max_repetitions", max(cls.ceiling, floor), 2)
        if ceiling < floor:
            raise UserError(f"[workload] max_repetitions = {ceiling} is below min_repetitions = "
                            f"{floor}: the ceiling must be at least the floor")
        budget = None if section.get("budget") is None else \
            parse_duration(section["budget"], "[workload] budget")
        return cls(None, floor, ceiling, budget, design)


def _whole(section: Mapping[str, Any], key: str, default: int, low: int) -> int:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 10_000:
        raise UserError(f"[workload] {key} = {value!r}: must be a whole number from {low} to "
                        "10000 (a comparison needs at least two measurements of each point)")
    return value


@dataclass
class Measured:
    """One measurement: its value (in the objective's metric) and what was seen around it."""

    value: float
    details: dict[str, Any] = field(default_factory=dict)


class _NotKept:
    """The recorder of a pass that is not a measurement (a warm-up): what it reports is
    dropped."""

    def second(self, second: Second) -> None:
        pass

    def os_seconds(self, samples: list[tuple[float, dict[str, float]]]) -> None:
        pass


NOT_KEPT = _NotKept()


class Recorder(Protocol):
    """Stores what a running measurement reports, as it arrives."""

    def second(self, second: Second) -> None: ...

    def os_seconds(self, samples: list[tuple[float, dict[str, float]]]) -> None: ...


class StoredTrial(Protocol):
    """A trial as the store gives it back (knoblab.store.Trial)."""

    @property
    def id(self) -> int: ...
    @property
    def repetition(self) -> int: ...
    @property
    def status(self) -> str: ...
    @property
    def value(self) -> float | None: ...
    @property
    def details(self) -> dict[str, Any]: ...


class StoredSeconds(Protocol):
    """The per-second rows of a run's trials (workload and OS), by trial id."""

    def seconds(self) -> dict[int, list[dict[str, float]]]: ...

    def os_seconds(self) -> dict[int, list[dict[str, float]]]: ...


@dataclass(frozen=True)
class Headline:
    """What a run ran, in its kind's own words: every title and question of a report is made
    of it, whatever the kind."""

    what: str  # the statement, the test, the log replayed
    subject: str  # how a question names it: "`SELECT …`", "sysbench oltp_read_only"
    how: tuple[str, ...] = ()  # how it ran: "cold cache", "4 threads"
    more: tuple[str, ...] = ()  # what a full title adds: tables, distribution, rate
    each: str | None = None  # one measurement's length, for a time series: "60 s"
    at_once: int = 1  # sessions that ran side by side, when the run did not sweep that


class Workload(ABC):
    """A configured workload of one kind, read from a spec."""

    kind: ClassVar[str]  # its name in [workload] kind and in the registry
    objective: ClassVar[Objective]
    # Every figure a measurement gives, by the name a [tune] objective or constraint uses; the
    # objective's own metric among them.
    metrics: ClassVar[Mapping[str, Metric]]
    # Sweepable besides the server's settings (threads; rows, engine, slack_type): verdicts
    # are given per value of these, never across them.
    parameters: ClassVar[tuple[str, ...]]
    keys: ClassVar[Keys]  # the keys its [workload] section may hold

    @property
    @abstractmethod
    def rounds(self) -> Rounds:
        """How many times each point is measured (fixed, or as many as the decisions need)."""

    @classmethod
    @abstractmethod
    def from_spec(cls, section: dict[str, Any], dataset: dict[str, Any],
                  sweep: dict[str, list[Any]], base_dir: Path | None) -> Workload:
        """Read and check its sections ([dataset] through `knoblab.datasets.read`, or its
        own data); UserError (one line) for anything wrong."""

    @abstractmethod
    def parameter_axis(self, name: str, values: list[Any]) -> list[str]:
        """A swept parameter's values, checked and normalised."""

    @abstractmethod
    def dataset(self, requested: Mapping[str, str]) -> Dataset:
        """The data a point runs on (its requested values may choose a variant)."""

    @property
    @abstractmethod
    def writes_data(self) -> bool:
        """Whether a measurement changes its data (each one then starts from a fresh copy;
        on a running server the data is rebuilt every time)."""

    @abstractmethod
    def connections_for(self, requested: Mapping[str, str]) -> int:
        """Connections a point opens, for the memory estimate."""

    @abstractmethod
    def measure(self, server: Server, requested: Mapping[str, str], session_knobs: list[str],
                recorder: Recorder) -> Measured:
        """One measurement on a configured server; WorkloadError when it fails."""

    @abstractmethod
    def describe(self) -> dict[str, object]:
        """What the run's description keeps of it (the results' "workload", with kind)."""

    @classmethod
    @abstractmethod
    def samples(cls, trials: list[StoredTrial], stored: StoredSeconds,
                statistics: Mapping[str, Any]) -> list[float]:
        """A point's samples for the tests: one per independent unit of replication."""

    @classmethod
    @abstractmethod
    def evidence(cls, trials: list[StoredTrial], summary: Summary | None,
                 stored: StoredSeconds, statistics: Mapping[str, Any]) -> dict[str, Any]:
        """A point's figures for the results: centre, interval and what was seen."""

    # -- capabilities, with their defaults ----------------------------------------------------

    # What one unit of work is ("run", "transaction"): counters that explain a result are
    # compared per unit, so a counter that merely grows with the work done explains nothing.
    unit_of_work: ClassVar[str] = "run"
    # How a time series is judged; None for kinds without one.
    steady: Steady | None = None

    @property
    def warnings(self) -> tuple[str, ...]:
        """What the user should know about this workload as written (said before the run)."""
        return ()

    @classmethod
    def headline(cls, described: Mapping[str, Any], swept: Collection[str]) -> Headline:
        """What a run of this kind ran, from its description as stored (`describe`); `swept`:
        the names the run swept, its parameters among them."""
        return Headline(cls.kind, f"the {cls.kind} workload")

    @classmethod
    def notes(cls, points: Sequence[tuple[str, Evidence]]) -> list[Note]:
        """What a sweep's table cannot say of this kind's figures (a column's rule, what a
        count means, a figure of its own), given each measured point's label and figures; none
        by default."""
        return []

    @classmethod
    def statement_classes(cls, described: Mapping[str, Any]) -> dict[str, str]:
        """The classes of statements a run of this kind timed one by one, fingerprint by class
        id, from its description as stored; none for kinds timed as a whole (the default)."""
        return {}

    @classmethod
    def work_done(cls, details: Mapping[str, Any]) -> float | None:
        """The units of work one measurement did, when that varies with the configuration
        (a fixed-time run's transactions); None when every measurement does the same work."""
        return None

    @property
    def least_seconds(self) -> float:
        """What one measurement takes at the least, known from the spec alone (a sysbench
        run's duration; 0 when only measuring tells): for budgets checked before a run."""
        return 0.0

    @property
    def span(self) -> float | None:
        """The seconds of load one measurement covers that `cut` can take the first seconds
        of ("5s": a replay's capture); None when this kind cannot be cut by time (the
        default)."""
        return None

    def check(self, catalog: Catalog, settings: Mapping[str, str]) -> None:
        """Checks against a server's catalog and the settings in force, before anything runs."""
        return None  # by default nothing a server's settings could make impossible

    def check_running_server(self, where: str, datadir: Path | None) -> None:
        """What a running server (not a sandbox) would not allow for this workload, besides
        what its data would not (each dataset's own check, made after this one)."""
        return None  # by default nothing beyond its data's

    @property
    def parts(self) -> int:
        """How many separately timed parts one measurement is made of (the query kind's timed
        runs; 1 for a measurement in one piece). In a blocked design the parts of a round's
        points alternate, so that every point is measured next in time to every other."""
        return 1

    def measure_part(self, server: Server, requested: Mapping[str, str],
                     session_knobs: list[str], recorder: Recorder) -> Measured:
        """One part of a measurement (the whole of it when it is in one piece)."""
        return self.measure(server, requested, session_knobs, recorder)

    def join(self, parts: list[Measured]) -> Measured:
        """The measurement made of its parts, as `measure` would have made it."""
        (whole,) = parts
        return whole

    def cut(self, raw: object, key: str) -> tuple[Workload, str]:
        """This workload cut to a cheaper part of itself (`raw`, as the spec's `key` gives it),
        for screening a search's candidates, and the part in words; UserError when this kind
        cannot be cut (the default)."""
        raise UserError(f"{key} = {raw!r}: a {self.kind} workload cannot be cut to a part of "
                        "itself (a replay of a capture can: its first seconds, or a share of "
                        f"its sessions); remove {key}")

    def warm_up(self, server: Server, requested: Mapping[str, str],
                session_knobs: list[str]) -> None:
        """An untimed pass of the load under a point's settings, right before each of its
        timed parts on a start shared with other points (the blocked design): the part then
        finds the caches as this configuration keeps them, not as the start (empty) or the
        previous point (another size, just emptied by the change) left them. Nothing of it is
        kept; WorkloadError when it fails (the point's measurement would fail alike). By
        default one whole measurement."""
        self.measure(server, requested, session_knobs, NOT_KEPT)
