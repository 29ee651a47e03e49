"""What a search is asked: the [tune] section, and the goal it sets (the objective to lower,
and the bound on a second metric)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knoblab import section
from knoblab.errors import UserError
from knoblab.keys import Key, Keys
from knoblab.records import Constraint, Goal, Metric
from knoblab.search import samplers
from knoblab.store import hide_passwords, in_memory, names_no_database, parse_url
from knoblab.units import parse_duration

KEYS = Keys(
    Key("knobs", "The settings searched, as a table ([tune.knobs]): setting = [\"32K\", "
        "\"64M\"] (a range of a size or count, searched on a log scale), { low, high, scale "
        "= \"linear\" }, [\"fsync\", \"O_DIRECT\"] (text: the choices) or { values = "
        "[...] } (these values only); or \"auto\": settings known to matter for performance, "
        "narrowed by the server's limits and the memory budget.", 'a table, or "auto"'),
    Key("budget", "Wall time of the whole study, every invocation together; trials, checks, "
        "the validation and the reduction share it.", 'a duration ("12m")'),
    Key("trials", "The most configurations the study measures.", "a whole number", "100", 2,
        100_000),
    Key("sampler", "Optuna's sampler that proposes each configuration: \"tpe\", \"gp\" or "
        "\"random\".", "text", '"tpe"'),
    Key("pruner", "Optuna's pruner that stops trials that are not among the best at their "
        "rung: \"halving\", \"hyperband\" or \"none\".", "text", '"halving"'),
    Key("batch", "Candidates measured on one server start, each beside a measurement of the "
        "baseline, when their settings need no restart and the workload leaves its data as "
        "it found it.", "a whole number", "6", 1, 64),
    Key("screen", "A replay's part each candidate is first measured on (\"60s\" or "
        "\"25%\"): the pruner's cheap first rung.", "a duration or a share"),
    Key("fidelity", "The part of the workload trials and checks measure: \"auto\" (sized "
        "to the budget, where the workload can be cut), \"whole\", or a part (\"10s\").",
        "text", '"auto"'),
    Key("rounds", "A cold trial's server starts per step, each measuring the baseline and "
        "the candidate.", "a whole number", "2", 2, 100),
    Key("max_rounds", "A trial the pruner keeps is measured this many times, then complete.",
        "a whole number", "8, or rounds if larger", 2, 400,
        bounds="rounds to 400"),
    Key("study", "The study's name: a study of that name in the storage is continued.",
        "text", "the spec's name"),
    Key("storage", "Optuna's storage URL, shared by workers on several machines "
        "(postgresql://USER@HOST/DATABASE; no password in it: PGPASSWORD or ~/.pgpass).",
        "text", "a file beside knoblab's SQLite store"),
    Key("validate", "How many of the best candidates are measured again against the "
        "baseline, each until decided.", "a whole number", "3", 1, 20),
    Key("objective", "The metric searched, one the workload measures (sysbench: tps, p95, "
        "p99).", "text", "the workload's own objective"),
    Key("constraint", "A bound on a second metric: { metric = \"p99\", max = 20 } (or min = "
        "... for a floor); a configuration that breaks it is never recommended.",
        "a table"),
)


@dataclass(frozen=True)
class TuneOptions:
    """The [tune] section (its knobs are read against the server's catalog, later)."""

    knobs: Any  # [tune.knobs] (checked by parse_space), or "auto"
    budget: float | None  # seconds of the study (every invocation together)
    trials: int  # at most, in the study
    sampler: str
    pruner: str  # Optuna's pruner by name (knoblab.search.samplers.PRUNERS)
    # Candidates measured on one server start, beside the baseline, when their settings
    # need no restart and the workload leaves its data as it found it (warm trials).
    batch: int
    # A part of the workload each candidate is first measured on (a replay's "60s" or
    # "25%"), as the pruner's cheap first rung; None: the whole workload every time.
    screen: str | None
    # The part of the workload trials and checks measure: "auto" (sized to the budget, where
    # the workload can be cut: knoblab.search.fidelity), "whole", or a part ("10s").
    fidelity: str
    rounds: int  # a cold trial's server starts per step: the baseline and the candidate on each
    max_rounds: int  # a trial the pruner keeps is measured this many times, then complete
    study: str
    storage: str | None  # an Optuna storage URL; None: a file beside knoblab's SQLite store
    validate: int  # the best candidates re-measured against the baseline, until decided
    objective: str | None  # a metric of the workload's; None: its own objective's
    constraint: Constraint | None

    @classmethod
    def from_spec(cls, raw: Mapping[str, Any], name: str) -> TuneOptions:
        section.check_keys("[tune]", dict(raw), KEYS)
        sampler = section.text(dict(raw), "sampler", "tune", "tpe")
        if sampler not in samplers.names():
            raise UserError(f"[tune] sampler = {sampler!r}: use one of "
                            f"{', '.join(samplers.names())}")
        storage = raw.get("storage")
        if storage is not None and not isinstance(storage, str):
            raise UserError(f"[tune] storage = {storage!r}: give a database URL in quotes")
        if storage is not None:
            no_password(storage)
            _names_a_database(storage)
        pruner = section.text(dict(raw), "pruner", "tune", "halving")
        if pruner not in samplers.pruner_names():
            raise UserError(f"[tune] pruner = {pruner!r}: use one of "
                            f"{', '.join(samplers.pruner_names())}")
        return cls(
            knobs=raw.get("knobs") or {},
            budget=None if raw.get("budget") is None else
            parse_duration(raw["budget"], "[tune] budget"),
            trials=section.number(dict(raw), "trials", "tune", 100, int, 2, 100_000),
            sampler=sampler,
            pruner=pruner,
            # six to a start, each beside a measurement of the baseline of its own
            batch=section.number(dict(raw), "batch", "tune", 6, int, 1, 64),
            screen=None if raw.get("screen") is None else str(raw["screen"]),
            fidelity=section.text(dict(raw), "fidelity", "tune", "auto"),
            rounds=(rounds := section.number(dict(raw), "rounds", "tune", 2, int, 2, 100)),
            max_rounds=section.number(dict(raw), "max_rounds", "tune", max(8, rounds), int,
                                      rounds, 400),
            study=section.text(dict(raw), "study", "tune", name),
            storage=storage,
            validate=section.number(dict(raw), "validate", "tune", 3, int, 1, 20),
            objective=section.text(dict(raw), "objective", "tune", "") or None,
            constraint=None if "constraint" not in raw else
            parse_constraint(raw["constraint"]),
        )


def _names_a_database(storage: str) -> None:
    """A storage URL must name where the study lives, checked before anything is made
    beside it (the workers' lock file): a URL without a database would put Optuna's tables
    in the server's default database, one without a file would keep the study in memory."""
    url = parse_url(storage, "[tune] storage")
    shown = hide_passwords(storage.strip())
    if names_no_database(url):
        raise UserError(f"[tune] storage = {shown!r} names no database, so the study "
                        "would go into the server's default one; name a database of its "
                        f"own: {url.get_backend_name()}://USER@HOST/DATABASE")
    if url.get_backend_name() != "sqlite":
        return
    if in_memory(url):
        raise UserError(f"[tune] storage = {shown!r} names no file, so the study would be "
                        "lost when knoblab exits; give sqlite:///PATH, or leave storage out "
                        "(a file beside the results store)")
    database = url.database or ""
    path = Path(database.removeprefix("file:").partition("?")[0]).expanduser().absolute()
    if path.is_dir():
        raise UserError(f"[tune] storage = {shown!r}: {path} is a folder; name a file in it, "
                        f"e.g. sqlite:///{path / 'tune.sqlite'}")
    if not path.parent.is_dir():
        raise UserError(f"[tune] storage = {shown!r}: the folder {path.parent} does not "
                        "exist; make it first, or name a file in a folder that does")


def parse_constraint(raw: Any) -> Constraint:
    """[tune] constraint = { metric = "p99", max = 20 } (or min = ...), checked."""
    shape = ("[tune] constraint: write { metric = \"p99\", max = 20 } (or min = ... for a "
             "floor, e.g. on tps)")
    if not isinstance(raw, dict) or not isinstance(raw.get("metric"), str) or \
            set(raw) - {"metric", "max", "min"} or len(raw.keys() & {"max", "min"}) != 1:
        raise UserError(shape)
    bound = "max" if "max" in raw else "min"
    limit = raw[bound]
    if isinstance(limit, bool) or not isinstance(limit, int | float) or limit <= 0:
        raise UserError(f"[tune] constraint {bound} = {limit!r}: give a number above 0, in "
                        "the metric's unit")
    return Constraint(raw["metric"], float(limit), bound == "max")


def goal_for(options: TuneOptions, workload: Any) -> Goal:
    """The goal [tune] sets for this workload: its objective and bound, checked against the
    metrics the workload measures."""
    metrics: Mapping[str, Metric] = workload.metrics
    known = ", ".join(metrics)
    name = options.objective or workload.objective.metric
    if name not in metrics:
        raise UserError(f"[tune] objective = {name!r}: the {workload.kind} workload "
                        f"measures {known}; use one of them")
    bounded = None
    if options.constraint is not None:
        if options.constraint.metric not in metrics:
            raise UserError(f"[tune] constraint on {options.constraint.metric!r}: the "
                            f"{workload.kind} workload measures {known}; bound one of them")
        if options.constraint.metric == name:
            raise UserError(f"[tune] constraint on {name!r}, the objective itself: bound a "
                            "second metric (the objective is already made as good as "
                            "it gets)")
        bounded = metrics[options.constraint.metric]
    return Goal(name, metrics[name], name == workload.objective.metric, options.constraint,
                bounded)


def no_password(storage: str) -> None:
    """The spec is stored with the study and shown in its report: no password in it."""
    url = parse_url(storage, "[tune] storage")
    if url.password is not None or "password" in url.query:
        raise UserError("[tune] storage: a password is never written in a spec; leave it out "
                        "of the URL and give it through PGPASSWORD or ~/.pgpass (PostgreSQL) "
                        "or an option file (MySQL, MariaDB)")
