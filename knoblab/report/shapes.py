"""The JSON documents a search and a comparison write (tune.json, `knoblab compare --json`),
each a record whose fields are its keys, in their order: what users' scripts read. result.json's
is `knoblab.records.ResultsJSON`. The words in them (a verdict said, a finding) are the
report's, filled in by knoblab.report.tuning and knoblab.listings."""

from __future__ import annotations

from dataclasses import dataclass

from knoblab.codec import JSON, Record
from knoblab.records import Interval
from knoblab.vocabulary import ComparisonVerdict, OutcomeState, PointVerdict, ValidationVerdict

# ----------------------------------------------------------------------------- tune.json


@dataclass(frozen=True)
class MetricNamed(Record):
    """The metric the search lowered or raised."""

    metric: str
    unit: str
    direction: str


@dataclass(frozen=True)
class BoundNamed(Record):
    """The constraint the search kept to: a second metric at most ("max") or at least
    ("min") a limit."""

    metric: str
    limit: float
    bound: str


@dataclass(frozen=True)
class TrialJSON(Record):
    """One configuration of the search. "kept": the pruner measured it further for its first
    measurements, which its interval includes (it leans in the trial's favour)."""

    number: int
    state: OutcomeState
    changes: dict[str, str]
    gain: float | None
    ci95: Interval | None
    kept: bool
    rounds: int
    run_ids: list[str]
    error: str | None
    observed: float | None
    feasible: bool


@dataclass(frozen=True)
class RecommendedJSON(Record):
    """What is recommended, and the figure it carries: its own measurement against the
    baseline, else (own_gain false) the validated candidate's, with all its settings."""

    trial: int
    settings: dict[str, str]
    changes: dict[str, str]
    searched: dict[str, str]
    left_as_they_are: list[str]
    reduced: bool
    not_recommended: dict[str, str]
    gain: float | None
    ci95: Interval | None
    confidence: float | None
    said: str
    verdict: ValidationVerdict | None
    rounds: int | None
    run_id: str | None
    own_gain: bool
    mycnf: str


@dataclass(frozen=True)
class TrimStep(Record):
    """Settings put back, and the verdict of the configuration once they are."""

    put_back: str
    verdict: PointVerdict


@dataclass(frozen=True)
class ReductionJSON(Record):
    """The recommendation without its settings of no measurable effect. "rest": what no step
    put back, put back from the configuration the steps chose; "unconfirmed": the reduction's
    choice, when its confirmation did not show it better (the validated candidate is then
    recommended whole); each effect's "loss" is the setting's gain to the recommendation."""

    run_id: str
    check_run_id: str | None
    equivalent: bool | None
    kept: dict[str, str]
    trimmed: list[str]
    grouped: bool
    trim_run_id: str | None
    trim_steps: list[TrimStep]
    rest: list[str]
    rest_run_id: str | None
    rest_verdict: PointVerdict | None
    unconfirmed: dict[str, str] | None
    effects: list[JSON]  # each Effect's JSON, with its finding and its words


@dataclass(frozen=True)
class ImportanceJSON(Record):
    """One setting's share of what matters (see knoblab.records.Importance)."""

    name: str
    share: float
    low: float
    high: float


@dataclass(frozen=True)
class TuneJSON(Record):
    """tune.json. A validation's interval ("ci95", the key's name kept for the programs that
    read it) is at the level its verdict was decided at, "confidence" (0.95 or more); its
    "finding" and "said" are its verdict in knoblab.words' terms, and in words.
    "importance_basis": "ablation", what each change of the recommendation was measured to
    contribute, or "trials", fANOVA over the search's trials; "importance_note": why there is
    none, when there is none."""

    study: str
    space: list[str]
    baseline: dict[str, str]
    spent_seconds: float
    stopped: str
    objective: MetricNamed | None
    constraint: BoundNamed | None
    trials: list[TrialJSON]
    validations: list[JSON]  # each Validation's JSON, with its trial's number and words
    recommended: RecommendedJSON | None
    reduction: ReductionJSON | None
    importance: list[ImportanceJSON]
    importance_basis: str | None
    importance_note: str | None


# ----------------------------------------------------------------------------- compare


@dataclass(frozen=True)
class FastestJSON(Record):
    """A run's leader shown better than another, with its verdict ("best" or "fastest
    measured")."""

    configuration: str
    verdict: PointVerdict | None


@dataclass(frozen=True)
class CompareRow(Record):
    """One configuration in both runs: the level in each, their ratio and its interval at
    "confidence" (the key's name kept for programs), and the verdict."""

    configuration: str
    first: float | None
    other: float | None
    ratio: float | None
    ci95: list[float] | None
    confidence: float
    p_value: float | None
    verdict: ComparisonVerdict


@dataclass(frozen=True)
class ComparisonJSON(Record):
    """One run against another (`knoblab compare --json`: a list of these). "best": only
    what a run recommends; "fastest": its leader shown better than another."""

    first: str
    other: str
    agree: bool
    best: dict[str, str | None]
    fastest: dict[str, FastestJSON | None]
    rows: list[CompareRow]
    machine: list[str]
    spec: list[str]
    incomplete: list[str]
