"""Where a study lives: its Optuna storage (beside knoblab's store, or a database of its own),
the workers that share it (one turn at a time to take a trial, heartbeats while measuring,
abandoned trials failed and queued again), and what is kept in it: each trial's outcome as
knoblab told it, and the validations and reduction made of its trials.

The budget is the study's: a second `knoblab tune` of the same spec goes on where the first
stopped, on this machine or another one sharing the storage.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import json
import math
import os
import random
import socket
import statistics
import typing
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knoblab import runner
from knoblab.errors import UserError
from knoblab.machine import differences
from knoblab.records import Reduction, Space, TrialOutcome, Validation, decode
from knoblab.search import samplers
from knoblab.server.sandbox import alive
from knoblab.store import Store, driver_url, safe_url
from knoblab.vocabulary import OutcomeState

if TYPE_CHECKING:
    import optuna

    from knoblab.search.options import TuneOptions
    from knoblab.spec import Spec

# Seconds between a worker's heartbeats, and of silence after which its trial is another's.
HEARTBEAT = 10
GRACE = 60
# Seconds between looks at a study whose last trials other workers are measuring.
WAIT = 2.0


LOCAL_HOSTS = frozenset({"", "localhost", "127.0.0.1", "::1"})
DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306}


def check_not_the_store(storage: str, store: Store) -> None:
    """[tune] storage naming knoblab's own results store would write Optuna's tables among
    knoblab's (and clash with them): refused before either is touched."""
    from sqlalchemy.engine import make_url

    try:
        study_url = make_url(driver_url(storage))
    except Exception:  # noqa: BLE001 - a malformed URL: opening the study says what is wrong
        return
    if _same_database(study_url, store.engine.url):
        raise UserError(f"[tune] storage = {safe_url(driver_url(storage))} is knoblab's own "
                        "results store: give the study a database of its own (e.g. "
                        "\"sqlite:///study.sqlite\", or another PostgreSQL database), or leave "
                        "storage out to keep it beside the results store")
    _check_optuna_storage(study_url, safe_url(driver_url(storage)))


# What makes a database an Optuna storage: its schema's version tables and its studies.
OPTUNA_MARKS = ({"version_info", "alembic_version"}, "studies")


def _check_optuna_storage(url: Any, shown: str) -> None:
    """A study's storage must be empty or an Optuna storage already: Optuna would add its
    tables to any other database (another program's, another home's knoblab store) and fail
    on the tables it finds there. Looked at before Optuna opens it, its own messages silenced
    (knoblab reports what goes wrong with the storage itself)."""
    import logging

    import sqlalchemy as sa

    logging.getLogger("optuna").propagate = False
    import optuna

    optuna.logging.disable_default_handler()
    if url.get_backend_name() == "sqlite":
        path = Path(url.database or "").expanduser()
        if not url.database or ":memory:" in url.database or not path.is_file() or \
                path.stat().st_size == 0:
            return  # a new file: Optuna makes it
        with path.open("rb") as head:
            magic = head.read(16)
        if magic != b"SQLite format 3\x00":
            raise UserError(f"[tune] storage = {shown}: {path} is not a SQLite database; "
                            "give a new file, or the study's storage")
    engine = None
    try:
        timeout = {"connect_timeout": 15} if url.get_backend_name() != "sqlite" else {}
        engine = sa.create_engine(url, connect_args=timeout)
        with engine.connect() as conn:
            names = {n for n in sa.inspect(conn).get_table_names()
                     if not n.startswith("sqlite_")}
    except Exception:  # noqa: BLE001 - unreachable, or no driver: opening it says what is wrong
        return
    finally:
        if engine is not None:
            engine.dispose()
    versions, studies = OPTUNA_MARKS
    if not names or (names & versions and studies in names and "knoblab_store" not in names):
        return
    ours = "knoblab_store" in names or {"runs", "points", "trials"} <= names
    shown_names = ", ".join(sorted(names)[:5]) + (", …" if len(names) > 5 else "")
    raise UserError(f"[tune] storage = {shown} is " + (
        "a knoblab results store, not a study's storage" if ours else
        f"another program's database (its tables: {shown_names}), not an Optuna storage") +
        ": give the study an empty database or a new file of its own (e.g. "
        "\"sqlite:///study.sqlite\"), or leave storage out")


def _same_database(a: Any, b: Any) -> bool:
    """Whether two SQLAlchemy URLs name one database: one SQLite file, or one database on one
    server (local host names taken as one host, the default port as written or not)."""
    backend = a.get_backend_name()
    if backend != b.get_backend_name():
        return False
    if backend == "sqlite":
        files = [x.database for x in (a, b)]
        if not all(files) or ":memory:" in files:
            return False
        paths = [Path(f).expanduser() for f in files]
        with contextlib.suppress(OSError):
            if all(p.exists() for p in paths):
                return os.path.samefile(*paths)
        return paths[0].resolve() == paths[1].resolve()

    def where(url: Any) -> tuple[str, int | None, str | None]:
        host = url.host or str(url.query.get("host") or "")
        host = "localhost" if host in LOCAL_HOSTS or host.startswith("/") else host.lower()
        return host, url.port or DEFAULT_PORTS.get(backend), url.database

    return where(a) == where(b)


def beside(store: Store) -> str:
    from knoblab.store import sqlite_url

    url = store.engine.url
    if url.drivername.startswith("sqlite") and url.database:
        path = Path(url.database)
        return sqlite_url(path.with_name(path.stem + '-tune.sqlite'))
    raise UserError("with a shared results store, give the tuning study's storage too: "
                    "[tune] storage = \"postgresql://...\" (a database of its own)")


def signature(spec: Spec, space: Space) -> str:
    """What makes two invocations the same study: the workload, the base and the space."""
    described = {"workload": spec.workload.describe(), "kind": spec.workload.kind,
                 "base": spec.base_config, "space": [dataclasses.asdict(d)
                                                     for d in space.dimensions]}
    return hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode()
                          ).hexdigest()[:16]


def open_study(options: TuneOptions, spec: Spec, space: Space, url: str,
               machine: dict[str, str]) -> optuna.Study:
    import optuna

    # Optuna's own log lines (its storage's retries, experimental features) would reach the
    # terminal raw: knoblab says what matters about the study in its own words.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    optuna.logging.disable_default_handler()
    optuna.logging.disable_propagation()
    sampler = samplers.make(options.sampler, spec.statistics.seed)  # replaced below
    try:
        # Each worker beats while it measures; a trial whose worker fell silent (killed, its
        # machine gone) is failed by the next worker that asks, and queued again.
        with heartbeat_unwarned():
            storage = optuna.storages.RDBStorage(
                url, engine_kwargs={"pool_pre_ping": True}, heartbeat_interval=HEARTBEAT,
                grace_period=GRACE, heartbeat_stale_trial_callback=_requeue)
        study = optuna.create_study(study_name=options.study, storage=storage,
                                    sampler=sampler, direction="minimize", load_if_exists=True,
                                    pruner=samplers.make_pruner(options.pruner,
                                                                options.max_rounds))
    except Exception as exc:  # noqa: BLE001 - whatever the storage's driver raises
        raise UserError(f"cannot open the tuning study's storage {safe_url(url)}: "
                        f"{str(exc).splitlines()[0]}; check [tune] storage") from None
    signed = signature(spec, space)
    found = study.user_attrs.get("signature")
    if found is None:
        study.set_user_attr("signature", signed)
    elif found != signed:
        raise UserError(f"study {options.study!r} searches another spec (its workload or "
                        "settings differ): give this one its own [tune] study = \"...\"")
    first = study.user_attrs.get("machine")
    if first is None:
        study.set_user_attr("machine", machine)
    elif differ := differences(machine, first):
        raise UserError(f"this machine is not like the one study {options.study!r} was "
                        f"measured on ({'; '.join(differ)}): its trials would not compare; "
                        "tune it in a study of its own ([tune] study = \"...\")")
    # Each invocation (a worker, or tune run again) proposes from a stream of its own: with
    # the study's seed alone, a second worker would propose the first one's configurations,
    # and tune run again would repeat the study's first trials. Counted in the study, in the
    # caller's turn: no two invocations share a number.
    invocation = int(study.user_attrs.get("invocations", 0))
    study.set_user_attr("invocations", invocation + 1)
    study.sampler = samplers.make(options.sampler,
                                  invocation_seed(spec.statistics.seed, invocation))
    return study


def invocation_seed(seed: int | None, invocation: int) -> int | None:
    """The seed of a study's n-th invocation: the study's own for the first (a study of one
    invocation is as reproducible as before), one derived from it for each later one."""
    if seed is None or invocation == 0:
        return seed
    digest = hashlib.sha256(f"knoblab tune {seed} {invocation}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def new_trial(study: optuna.Study, distributions: dict[str, Any], space: Space
              ) -> optuna.Trial | None:
    """A trial of a configuration that no trial of the study has measured, is measuring or
    has queued; None when none is left to find. A sampler can propose one again (TPE once
    it has settled, GP whose model a repeat does not change): the repeat is failed at once,
    noted (`repeats`), not measured nor counted, and a configuration drawn at random among
    those not measured yet is queued and taken instead. A queued trial (the baseline, one cut
    short and queued again) is measured as asked."""
    import optuna

    trial = study.ask(distributions)
    trials = study.trials
    mine = next(t for t in trials if t.number == trial.number)
    if "fixed_params" in mine.system_attrs:
        return trial
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED,
              optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING)
    taken = {_key(space, t.params): t.number for t in trials
             if t.state in states and t.number != trial.number and t.params}
    repeated = taken.get(_key(space, trial.params))
    if repeated is None:
        return trial
    trial.set_user_attr("repeats", repeated)
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    rng = random.Random(f"{study.study_name} {trial.number}")  # reproducible, per trial
    for _ in range(DRAWS):
        params = _drawn(space, rng)
        if _key(space, params) not in taken:
            study.enqueue_trial(params, user_attrs={"drawn": f"at random: the sampler "
                                                             f"repeated trial {repeated}"})
            return study.ask(distributions)
    return None


DRAWS = 1000  # random draws that find nothing new: the space is as good as used up


def _key(space: Space, params: dict[str, Any]) -> tuple[str, ...]:
    """A configuration as the server takes it: two parameters on one block are one."""
    try:
        return tuple(space.config(params).values())
    except (KeyError, TypeError, ValueError):  # a trial of another space: matches none
        return ("",)


def _drawn(space: Space, rng: random.Random) -> dict[str, Any]:
    """Parameters drawn uniformly from the space (log ranges on the log scale)."""
    params: dict[str, Any] = {}
    for d in space.dimensions:
        if d.choices:
            params[d.name] = rng.choice(d.choices)
            continue
        assert d.low is not None and d.high is not None
        if d.log:
            low, high = math.log(d.low), math.log(d.high)
            params[d.name] = min(d.high, max(d.low, round(math.exp(rng.uniform(low, high)))))
        else:
            params[d.name] = d.low + rng.randrange((d.high - d.low) // d.step + 1) * d.step
    return params


class Turn:
    """One worker at a time counts a study's trials and takes a new one, whatever machine it
    runs on: a lock of the study's own storage (an advisory lock on PostgreSQL, a named lock
    on MySQL and MariaDB, a file lock beside a SQLite study). One lock for the storage, not
    one per study: workers of two new studies would otherwise both create its tables."""

    def __init__(self, url: str) -> None:
        from sqlalchemy.engine import make_url

        try:
            parsed = make_url(url)
        except Exception:  # noqa: BLE001 - open_study has said what is wrong with it
            parsed = None
        self.backend = "" if parsed is None else parsed.get_backend_name()
        self.url, self.parsed = url, parsed
        database = "" if parsed is None else str(parsed.database)
        digest = hashlib.sha256(f"knoblab tune {database}".encode()).digest()
        self.key = int.from_bytes(digest[:8], "big", signed=True)
        self.name = f"knoblab-tune-{digest.hex()[:32]}"
        if parsed is not None and self.backend not in ("sqlite", "postgresql", "mysql",
                                                       "mariadb"):
            raise UserError(f"[tune] storage {safe_url(url)}: knoblab keeps a study's trials "
                            "on SQLite, PostgreSQL or MySQL/MariaDB; use one of them")
        self._engine: Any = None

    def engine(self) -> Any:
        if self._engine is None:
            import sqlalchemy as sa

            self._engine = sa.create_engine(self.url, poolclass=sa.pool.NullPool)
        return self._engine

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        import sqlalchemy as sa

        with contextlib.ExitStack() as held:
            try:
                self._take(held)
            except (OSError, sa.exc.SQLAlchemyError) as exc:
                raise UserError(f"cannot open the tuning study's storage {safe_url(self.url)}: "
                                f"{(str(exc).splitlines() or [type(exc).__name__])[0]}; check "
                                "[tune] storage") from None
            yield

    def _take(self, held: contextlib.ExitStack) -> None:
        """The lock, its release left to `held`."""
        import sqlalchemy as sa

        if not self.backend:
            return  # an unreadable URL: opening the study refuses it
        if self.backend == "sqlite":
            database = self.parsed.database if self.parsed is not None else None
            if not database or database == ":memory:":
                return  # one process: nobody to take turns with
            import fcntl

            path = Path(database).expanduser()
            fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
            held.callback(os.close, fd)  # closing it releases the lock
            fcntl.flock(fd, fcntl.LOCK_EX)
        elif self.backend == "postgresql":
            # Released with the transaction, also when the connection is lost.
            conn = held.enter_context(self.engine().begin())
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": self.key})
        else:
            conn = held.enter_context(self.engine().connect())
            conn.execute(sa.text("SELECT GET_LOCK(:name, -1)"), {"name": self.name})
            held.callback(conn.execute, sa.text("SELECT RELEASE_LOCK(:name)"),
                          {"name": self.name})


def validated(study: optuna.Study, outcomes: list[TrialOutcome]
              ) -> tuple[list[Validation] | None, Reduction | None, Validation | None]:
    """The validations (reduction, confirmation) already made of these very trials: a
    finished study asked again shows them instead of measuring them again. A study checked by
    an older knoblab has no confirmation: its reduced recommendation says so."""
    saved = study.user_attrs.get("validation")
    if not saved or saved.get("trials") != len(outcomes):
        return None, None, None
    by_number = {o.number: o for o in outcomes}
    validations = [dataclasses.replace(_decoded(Validation, {**v, "trial": {}}),
                                       trial=by_number[v["trial"]])
                   for v in saved["items"] if v["trial"] in by_number]
    reduction, confirmation = saved.get("reduction"), saved.get("confirmation")
    return validations, \
        None if reduction is None else _decoded(Reduction, reduction), \
        None if confirmation is None else _confirmation(confirmation)


# Keys that studies saved by older versions spell otherwise
_OLD_KEYS = {"run": "run_id", "interval": "ci95", "check_run": "check_run_id",
             "trim_run": "trim_run_id"}


def _decoded(record: type[Any], saved: dict[str, Any]) -> Any:
    renamed = {_OLD_KEYS.get(k, k): v for k, v in saved.items()}
    if "effects" in renamed:
        renamed["effects"] = [{_OLD_KEYS.get(k, k): v for k, v in e.items()}
                              for e in renamed["effects"]]
    return decode(record, renamed)


def _confirmation(saved: dict[str, Any]) -> Validation:
    if isinstance(saved["trial"], int):  # saved by an older version: the trial's parts apart
        reduced = TrialOutcome(saved["trial"], dict(saved["config"]), dict(saved["changes"]),
                               OutcomeState.SCORED, None, [], (saved["run"],))
        return dataclasses.replace(_decoded(Validation, {**saved, "trial": {}}), trial=reduced)
    return typing.cast(Validation, _decoded(Validation, saved))


def save_validations(study: optuna.Study, outcomes: list[TrialOutcome],
                     validations: list[Validation], reduction: Reduction | None,
                     confirmation: Validation | None = None) -> None:
    """Kept in the study as the records' JSON; a validation names its trial by number."""
    study.set_user_attr("validation", {
        "trials": len(outcomes),
        "items": [{**v.to_json(), "trial": v.trial.number} for v in validations],
        # The recommendation measured as itself, when it is not the validated candidate.
        "confirmation": None if confirmation is None else confirmation.to_json(),
        "reduction": None if reduction is None else reduction.to_json()})


# What a trial keeps of its outcome as Optuna user attributes, under the record's own names
# (the number, configuration and score are the trial's own).
_KEPT = ("state", "changes", "ratios", "runs", "error", "observed", "violation", "fidelity",
         "screened")


def tell(study: optuna.Study, trial: optuna.Trial, outcome: TrialOutcome, seconds: float,
         earlier: list[TrialOutcome]) -> None:
    """The trial's outcome, kept with it in the study (with its gain, interval and number of
    measurements, which optuna-dashboard shows), and told to the sampler."""
    import optuna

    trial.set_user_attr("seconds", round(seconds, 3))
    for key, value in outcome.to_json().items():
        if key in _KEPT and value is not None:
            trial.set_user_attr(key, value)
    infeasible = outcome.state in (OutcomeState.REFUSED, OutcomeState.FAILED)
    trial.set_user_attr("infeasible", 1.0 if infeasible else 0.0)
    # Constraints above 0 are violated: the sampler learns where not to look.
    trial.set_constraint("refused", 1.0 if infeasible else 0.0)
    trial.set_constraint("bound", outcome.violation or 0.0)
    trial.set_user_attr("measurements", len(outcome.ratios))
    if outcome.gain is not None:
        trial.set_user_attr("gain", round(outcome.gain, 4))
    if (interval := outcome.interval()) is not None:
        trial.set_user_attr("ci95", [round(x, 4) for x in interval])
    if outcome.state == OutcomeState.PRUNED:
        # Its value is its last running mean, as reported (Optuna's own rule for a pruned
        # trial), which the sampler ranks below the trials measured in full.
        trial.set_user_attr("score", outcome.score)
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        return
    # An infeasible trial is told as complete, with a value no better than the worst seen and
    # a violated constraint, so that the sampler learns its region (a failed trial it would
    # ignore, and propose again).
    worst = max((o.score for o in earlier if o.score is not None), default=0.0)
    study.tell(trial, outcome.score if outcome.score is not None else worst + 1.0)


def params_for(space: Space, config: dict[str, str]) -> dict[str, Any] | None:
    """The sampler's parameters of a configuration, when it lies in the space."""
    params: dict[str, Any] = {}
    for d in space.dimensions:
        value = config[d.name]
        if d.choices:
            if value not in d.choices:
                return None
            params[d.name] = value
            continue
        assert d.low is not None and d.high is not None
        try:
            number = int(value)
        except ValueError:
            return None
        if not d.low <= number <= d.high:
            return None
        params[d.name] = number
    return params


def outcome_of(trial: optuna.trial.FrozenTrial, space: Space,
               baseline: dict[str, str]) -> TrialOutcome | None:
    """A trial of the study as knoblab told it: only a complete one, whose value and state
    were stored together by one `tell`. A trial cut short while it was told (its attributes
    written, its value not) is failed later and queued again: not an outcome."""
    if trial.state not in told_states() or "state" not in trial.user_attrs:
        return None
    attrs, state = trial.user_attrs, trial.user_attrs["state"]
    score = attrs.get("score") if state == OutcomeState.PRUNED else trial.value \
        if state in (OutcomeState.SCORED, OutcomeState.BASELINE) else None
    return typing.cast(TrialOutcome, decode(TrialOutcome, {
        **{k: attrs[k] for k in _KEPT if k in attrs}, "number": trial.number,
        "config": space.config(trial.params), "score": score}))


def told_states() -> tuple[optuna.trial.TrialState, ...]:
    """The states of a trial knoblab has told: measured in full (or not measurable), or
    stopped by the pruner."""
    import optuna

    return optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED


def seconds_spent(trials: list[optuna.trial.FrozenTrial]) -> float:
    return sum(float(t.user_attrs.get("seconds", 0.0)) for t in trials)


def checked_seconds(study: optuna.Study) -> float:
    """The wall time spent validating and reducing the study's findings, every time."""
    return float(study.user_attrs.get("checked_seconds", 0.0))


def add_checked_seconds(study: optuna.Study, seconds: float) -> None:
    study.set_user_attr("checked_seconds", round(checked_seconds(study) + seconds, 3))


def typical_trial(trials: list[optuna.trial.FrozenTrial]) -> float:
    """The wall time of a measured trial, on the average: pruned ones are cheap, the ones
    kept dear, and the budget pays for both."""
    seconds = [float(t.user_attrs["seconds"]) for t in trials
               if t.user_attrs.get("state") in (OutcomeState.SCORED, OutcomeState.PRUNED)
               and "seconds" in t.user_attrs]
    return statistics.fmean(seconds) if seconds else 0.0


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@contextlib.contextmanager
def heartbeat_unwarned() -> Iterator[None]:
    """Optuna calls its heartbeat experimental, and expects it only within study.optimize;
    knoblab asks and tells, and beats with beating."""
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.filterwarnings("ignore", message="Heartbeat of storage")
        yield


def _requeue(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """A trial failed for want of its worker's heartbeat: its configuration queued again."""
    study.enqueue_trial(dict(trial.params), skip_if_exists=False)


@contextlib.contextmanager
def beating(study: optuna.Study, trials: typing.Callable[[], list[optuna.Trial]]
            ) -> Iterator[None]:
    """The heartbeat of the `trials` being measured (they change as the search goes),
    every HEARTBEAT seconds."""
    def once() -> None:
        for trial in trials():
            beat(study, trial)

    with runner.beating(once, HEARTBEAT):
        yield


def beat(study: optuna.Study, trial: optuna.Trial) -> None:
    storage = study._storage  # noqa: SLF001 - the heartbeat is the storage's, by trial id
    storage.record_heartbeat(trial._trial_id)  # type: ignore[attr-defined]  # noqa: SLF001


def abandon(study: optuna.Study, trial: optuna.Trial) -> None:
    """A trial cut short (Ctrl-C, an error): failed, and its configuration queued again so
    that the next invocation measures it first."""
    import optuna

    params = dict(trial.params)
    # A stop while it was being told may come after the tell itself: then it stands.
    told = study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
    if told.state == optuna.trial.TrialState.FAIL:
        study.enqueue_trial(params, skip_if_exists=False)


def requeue_abandoned(study: optuna.Study) -> None:
    """Trials left running by a process of this machine that is gone (killed), or by a worker
    killed the moment it took one (no owner yet, long ago): failed and queued again."""
    import optuna

    host = socket.gethostname()
    for trial in study.trials:
        if trial.state != optuna.trial.TrialState.RUNNING:
            continue
        owner = str(trial.user_attrs.get("owner", ""))
        where, _, pid = owner.rpartition(":")
        if not owner:
            started = trial.datetime_start
            if started is None or (datetime.datetime.now() - started).total_seconds() < GRACE:
                continue
        elif where != host or not pid.isdigit() or alive(int(pid)):
            continue
        study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
        study.enqueue_trial(dict(trial.params), skip_if_exists=False)
