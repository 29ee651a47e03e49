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

    metric: str  # its name: "seconds", "tps", "p95" or "p99" ([tune] objective)
    unit: str  # "s", "tps" or "ms"
    direction: str  # "minimize" or "maximize": which way is better


@dataclass(frozen=True)
class BoundNamed(Record):
    """The constraint the search kept to: a second metric at most ("max") or at least
    ("min") a limit."""

    metric: str  # the bounded metric's name ("p99")
    limit: float  # in the metric's unit
    bound: str  # "max": at most the limit; "min": at least


@dataclass(frozen=True)
class TrialJSON(Record):
    """One configuration of the search. "kept": the pruner measured it further for its first
    measurements, which its interval includes (it leans in the trial's favour)."""

    number: int  # the trial's number in the study
    state: OutcomeState  # what became of it; scored and pruned were measured against the baseline
    changes: dict[str, str]  # its settings that differ from the baseline, as the server takes them
    gain: float | None  # +0.08: 8% better than the baseline; null: not measured
    ci95: Interval | None  # the gain's 95% interval over its rounds; null: fewer than two
    kept: bool  # true: the pruner measured it further, over others it pruned (above)
    rounds: int  # the rounds its gain is the mean of (one ratio to the baseline each)
    run_ids: list[str]  # its runs in the store: the first, then those of its further rounds
    error: str | None  # why it was refused or failed; null otherwise
    # the constrained metric, its median (in its unit); null: no constraint, or not measured
    observed: float | None
    feasible: bool  # scored, and within the constraint


@dataclass(frozen=True)
class RecommendedJSON(Record):
    """What is recommended, and the figure it carries: its own measurement against the
    baseline, else (own_gain false) the validated candidate's, with all its settings."""

    trial: int  # the number of the validated trial it comes from
    settings: dict[str, str]  # what to apply: changes on [server.config], as in force when measured
    changes: dict[str, str]  # the changes to make, each with the settings tied to it ([tie])
    searched: dict[str, str]  # the validated trial's changes, all of them
    # the trial's settings left at the baseline's: no measurable effect, or a cost unseen here
    left_as_they_are: list[str]
    reduced: bool  # true: its settings were put back to see which matter, or it has only one
    # setting: why it is never recommended (a cost this workload cannot see)
    not_recommended: dict[str, str]
    # +0.08: 8% better than the baseline (whose: own_gain); null: no round measured
    gain: float | None
    ci95: Interval | None  # the gain's interval at confidence; null: fewer than two rounds
    confidence: float | None  # the level of ci95, its verdict's (0.95 or more)
    said: str  # the gain in words, and whose it is
    verdict: ValidationVerdict | None  # that measurement's verdict against the baseline
    rounds: int | None  # that measurement's rounds (one ratio to the baseline each)
    run_id: str | None  # that measurement's run in the store
    own_gain: bool  # true: the figures are its own measurement; false: the validated trial's
    mycnf: str  # the [mysqld] fragment to apply (as in recommended.cnf)


@dataclass(frozen=True)
class TrimStep(Record):
    """Settings put back, and the verdict of the configuration once they are."""

    put_back: str  # the setting put back (grouped: several, comma-separated), on those before
    # the configuration's verdict once it is put back, in the chain's run (trim_run_id)
    verdict: PointVerdict


@dataclass(frozen=True)
class ReductionJSON(Record):
    """The recommendation without its settings of no measurable effect. "rest": what no step
    put back, put back from the configuration the steps chose; "unconfirmed": the reduction's
    choice, when its confirmation did not show it better (the validated candidate is then
    recommended whole); each effect's "loss" is the setting's gain to the recommendation."""

    run_id: str  # the run that put each setting back alone (grouped: the groups' run)
    # the run comparing the reduced with the full configuration; null: none
    check_run_id: str | None
    equivalent: bool | None  # true: the reduced shown equivalent to the full one; null: not checked
    kept: dict[str, str]  # the searched settings decided on (those of unseen cost still among them)
    trimmed: list[str]  # the settings put back for good, by the cumulative put-back or rest
    grouped: bool  # true: put back in groups, the least important first; no setting alone
    trim_run_id: str | None  # the run that put settings back cumulatively; null: none
    trim_steps: list[TrimStep]  # each step of that run, in order
    rest: list[str]  # what no step put back, put back together afterwards (above)
    rest_run_id: str | None  # the run that put rest back; null: not run
    # that configuration's verdict without rest: worse, and rest stays; else it goes; null: not run
    rest_verdict: PointVerdict | None
    # the reduction's choice, when its confirmation did not show it better; null otherwise
    unconfirmed: dict[str, str] | None
    effects: list[JSON]  # each Effect's JSON, with its finding and its words


@dataclass(frozen=True)
class ImportanceJSON(Record):
    """One setting's share of what matters (see knoblab.records.Importance)."""

    name: str  # the setting
    share: float  # of what matters (importance_basis); the shares sum to about 1
    # ablation: from its measurement's interval; trials: the 10th percentile over resamples
    low: float
    # ablation: from its measurement's interval; trials: the 90th percentile over resamples
    high: float


@dataclass(frozen=True)
class TuneJSON(Record):
    """tune.json. A validation's interval ("ci95", the key's name kept for the programs that
    read it) is at the level its verdict was decided at, "confidence" (0.95 or more); its
    "finding" and "said" are its verdict in knoblab.words' terms, and in words.
    "importance_basis": "ablation", what each change of the recommendation was measured to
    contribute, or "trials", fANOVA over the search's trials; "importance_note": why there is
    none, when there is none."""

    study: str  # the study's name
    space: list[str]  # the settings searched, with their ranges
    baseline: dict[str, str]  # the configuration trials are measured against
    spent_seconds: float  # wall time of every invocation together
    stopped: str  # why the search stopped
    objective: MetricNamed | None  # the metric searched, and which way is better
    constraint: BoundNamed | None  # the bound on a second metric, if any
    trials: list[TrialJSON]  # every trial: its changes and outcome
    validations: list[JSON]  # each Validation's JSON, with its trial's number and words
    recommended: RecommendedJSON | None  # what to apply, with its gain; null: keep it
    reduction: ReductionJSON | None  # the settings put back one by one, and why
    importance: list[ImportanceJSON]  # how much each setting mattered
    importance_basis: str | None  # "ablation" or "trials" (above)
    importance_note: str | None  # why there is no importance, when none


# ----------------------------------------------------------------------------- compare


@dataclass(frozen=True)
class FastestJSON(Record):
    """A run's leader shown better than another, with its verdict ("best" or "fastest
    measured")."""

    configuration: str  # its settings: "read_buffer_size=128K, sort_buffer_size=2M"
    # "best" when the run recommends it, else "fastest measured" (or highest)
    verdict: PointVerdict | None


@dataclass(frozen=True)
class CompareRow(Record):
    """One configuration in both runs: the level in each, their ratio and its interval at
    "confidence" (the key's name kept for programs), and the verdict."""

    configuration: str  # its settings: "read_buffer_size=128K"
    # its level in the first run (median of times, mean of tps); null: not measured
    first: float | None
    other: float | None  # its level in the other run; null: not measured
    ratio: float | None  # other / first; null: a run has fewer than two samples of it
    ci95: list[float] | None  # the ratio's interval at confidence, [low, high]; null: as ratio
    confidence: float  # the level of ci95: the first run's [statistics] confidence
    p_value: float | None  # Holm-adjusted over the rows; null: as ratio
    # differs: significant, by min_effect or more; same: ci95 within ±min_effect
    verdict: ComparisonVerdict


@dataclass(frozen=True)
class ComparisonJSON(Record):
    """One run against another (`knoblab compare --json`: a list of these). "best": only
    what a run recommends; "fastest": its leader shown better than another."""

    first: str  # the run every other is compared with
    other: str  # the run compared with it
    agree: bool  # both lead with the same configuration and verdict
    best: dict[str, str | None]  # run id: what it recommends (null: nothing)
    fastest: dict[str, FastestJSON | None]  # run id: its leader shown better, if any
    rows: list[CompareRow]  # each configuration both runs measured
    machine: list[str]  # how the machines differ ("cores: 2 in …")
    spec: list[str]  # the lines of the specs that differ
    incomplete: list[str]  # runs not finished: which, and what is missing
