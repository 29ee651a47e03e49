"""The words knoblab judges and records with: one enum per vocabulary.

Each is a StrEnum, so a member is its word: stored, written to JSON and shown exactly as the
word itself, and equal to it (a store or a results JSON written before these enums reads back
into the same members). Code names a word by its member, never by the literal: a misspelt
member fails at once, a misspelt literal silently never matches (tests/test_vocabulary.py
checks that no comparison in knoblab spells one out).

What the words mean to a reader, in sentences, is knoblab.words' and knoblab.report's business.
"""

from __future__ import annotations

from enum import StrEnum


class PointVerdict(StrEnum):
    """A point of a run against the run's leader (knoblab.stats.judge)."""

    # The leader, when some point is shown worse than it: "best" only when the run recommends
    # it (the default, or a change shown to help), else what it is, by the objective's way.
    BEST = "best"
    FASTEST = "fastest measured"  # a time's leader the run does not recommend
    HIGHEST = "highest tps measured"  # a throughput's (tps, the one rate measured)
    EQUIVALENT = "equivalent"  # shown within ±min_effect of the leader
    INCONCLUSIVE = "inconclusive"  # neither shown equivalent nor worse (yet)
    WORSE = "worse"  # shown worse than the leader by at least min_effect
    FAILED = "failed"  # no measurement succeeded
    NOT_RUN = "not run"  # the run stopped before it
    INDISTINGUISHABLE = "indistinguishable"  # what runs of the first versions said: still read

    @property
    def leads(self) -> bool:
        """The leader shown better than some point: best, or the fastest (highest) measured."""
        return self in (PointVerdict.BEST, PointVerdict.FASTEST, PointVerdict.HIGHEST)


class StepVerdict(StrEnum):
    """A step of a steps run against the step before it (a row of a steps table)."""

    BASE = "base"  # step 0, what every change is measured from
    GAIN = "gain"
    LOSS = "loss"
    NO_EFFECT = "no measurable effect"
    FAILED = "failed"
    CHANGES_NOTHING = "changes nothing"  # its values were already in force: not run
    UNAVAILABLE = "unavailable"  # a setting this server lacks: not run


class ValidationVerdict(StrEnum):
    """A tuning study's candidate measured again against the baseline (knoblab.search.proof)."""

    BETTER = "better"
    WORSE = "worse"
    SAME = "same"  # within ±min_effect
    UNDECIDED = "undecided"
    VIOLATES = "violates"  # better, but breaking the study's constraint


class ClassVerdict(StrEnum):
    """A statement class under one configuration against the reference (knoblab.classes)."""

    FASTER = "faster"
    SLOWER = "slower"
    NO_DIFFERENCE = "no significant difference"
    NOT_MEASURED = "not measured"


class ComparisonVerdict(StrEnum):
    """A configuration measured in two runs (knoblab compare)."""

    SAME = "same"  # the whole interval within ±min_effect
    DIFFERS = "differs"  # significant, and by at least min_effect
    INCONCLUSIVE = "inconclusive"
    UNMEASURED = "unmeasured"  # a side has no measurement


class Finding(StrEnum):
    """What a comparison showed of a change (knoblab.words says it in words)."""

    HELPS = "helps"
    HURTS = "hurts"
    SAME = "same"  # within ±min_effect
    UNSHOWN = "unshown"  # not shown either way


class RunStatus(StrEnum):
    """A run's or a tuning study's state, as stored; KILLED is never stored: it is a run
    left RUNNING by a process now gone, as a listing tells it."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    KILLED = "killed"


class TrialState(StrEnum):
    """A trial's life: running until it ends done or failed; discarded when interrupted (a
    resumed run measures it again)."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    DISCARDED = "discarded"


class OutcomeState(StrEnum):
    """What became of a tuning study's trial (records.TrialOutcome)."""

    SCORED = "scored"  # measured against the baseline
    BASELINE = "baseline"  # the baseline itself
    REFUSED = "refused"  # never run: unsafe or impossible
    FAILED = "failed"  # the server said no
    PRUNED = "pruned"  # measured briefly, and stopped there: not among the best at its rung


class StopReason(StrEnum):
    """Why a run's rounds until decided ended (its info's `stopped`; a fixed number of rounds
    records none)."""

    DECIDED = "decided"  # every comparison decided
    FUTILE = "futile"  # the rounds left could not decide what was undecided
    BUDGET = "budget"  # its time was spent (knoblab resume --budget extends it)
    CEILING = "ceiling"  # the most rounds were measured


class Design(StrEnum):
    """How a run's rounds measure its points (`[workload] design`; "auto", its default, lets
    knoblab choose: blocked where the settings and the workload allow it, else restarts)."""

    BLOCKED = "blocked"  # one server start a round, every point's settings set in place
    RESTARTS = "restarts"  # a server start per measurement


class SearchStop(StrEnum):
    """Why a tuning study's search ended (records.TuneResult.stopped)."""

    TRIALS = "trials"  # its trials are done
    BUDGET = "budget"  # its share of the budget was spent
    SPACE = "space"  # every configuration of the space was measured


class VerifyStop(StrEnum):
    """Why a knoblab verify ended (its answer's `stopped`)."""

    DECIDED = "decided"  # the difference between production's values and B's was decided
    TIME = "time"  # its --for was spent
    GUARD = "guard"  # a guard rail tripped: production's values were put back
    LOAD = "load"  # production's load went away


class SavedState(StrEnum):
    """A setting a run changed on a running server (the saved_settings table's status): what
    knoblab restore puts back while it is CHANGED."""

    CHANGED = "changed"
    RESTORED = "restored"  # put back, and read back at its original value
    UNCHANGED = "unchanged"  # the server refused the change: nothing to put back
    LEFT = "left"  # left alone: changed again since knoblab changed it, by someone else
    FORGOTTEN = "forgotten"  # given up by the user (knoblab restore --forget)


class StepRole(StrEnum):
    """Where a point of a steps run stands (its `role`)."""

    CUMULATIVE = "cumulative"  # on top of the steps before
    ALONE = "alone"  # its change alone, on the base


class Experiment(StrEnum):
    """What a run is (the runs table's `kind`)."""

    SWEEP = "sweep"  # points compared with each other
    STEPS = "steps"  # settings applied one by one
    CAPTURE = "capture"  # knoblab capture: a running server's statements; measures nothing
    VERIFY = "verify"  # knoblab verify: a recommendation on a running server, under its load

    @property
    def has_points(self) -> bool:
        """Whether its results are points measured against each other, which report,
        compare and resume take (a capture measures nothing; a verify keeps its own answer)."""
        return self not in (Experiment.CAPTURE, Experiment.VERIFY)
