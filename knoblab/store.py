"""Where every measurement goes the moment it exists: SQLite by default, any SQLAlchemy URL.

Write side: create a run, record each trial as it finishes, mark the run's status.
Read side: a run, its points and its trials — everything reports are built from.
A run is resumable: its plan is derived from the stored spec and seed, and trials already
stored as done (or failed) are not repeated.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from knoblab.errors import UserError
from knoblab.stats import Statistics

SCHEMA_VERSION = 1
metadata = sa.MetaData()

runs = sa.Table(
    "runs", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),  # running, done, failed, interrupted
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("finished_at", sa.Float),
    sa.Column("host", sa.Text),
    sa.Column("spec_source", sa.Text, nullable=False),
    sa.Column("server_binary", sa.Text),
    sa.Column("server_version", sa.Text),
    sa.Column("info", sa.Text),  # JSON: dataset description, schema version, ...
    sa.Column("error", sa.Text),
)

points = sa.Table(
    "points", metadata,
    sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id"), primary_key=True),
    sa.Column("idx", sa.Integer, primary_key=True),
    sa.Column("requested", sa.Text, nullable=False),  # JSON {knob: value as written}
    sa.Column("config", sa.Text, nullable=False),  # JSON {knob: value as given to the server}
)

trials = sa.Table(
    "trials", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id"), nullable=False),
    sa.Column("point_idx", sa.Integer, nullable=False),
    sa.Column("repetition", sa.Integer, nullable=False),
    sa.Column("position", sa.Integer, nullable=False),  # place in the interleaved plan
    sa.Column("status", sa.String(16), nullable=False),  # done, failed, discarded
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("finished_at", sa.Float, nullable=False),
    sa.Column("value", sa.Float),
    sa.Column("effective", sa.Text),  # JSON {knob: value the server reported}
    sa.Column("details", sa.Text),  # JSON: CPU, I/O, regime, session values, timings
    sa.Column("error", sa.Text),
    sa.Index("trials_by_run", "run_id", "point_idx", "repetition"),
)

# Per-second reports of time-series workloads (sysbench), stored as each second arrives.
seconds = sa.Table(
    "seconds", metadata,
    sa.Column("trial_id", sa.Integer, sa.ForeignKey("trials.id"), primary_key=True),
    sa.Column("t", sa.Float, primary_key=True),  # seconds since the workload started
    sa.Column("threads", sa.Integer),
    sa.Column("tps", sa.Float),
    sa.Column("qps", sa.Float),
    sa.Column("reads", sa.Float),
    sa.Column("writes", sa.Float),
    sa.Column("other", sa.Float),
    sa.Column("latency_ms", sa.Float),
    sa.Column("errors", sa.Float),
    sa.Column("reconnects", sa.Float),
)
# The operating system's figures every second of a long measurement (the article's vmstat).
os_seconds = sa.Table(
    "os_seconds", metadata,
    sa.Column("trial_id", sa.Integer, sa.ForeignKey("trials.id"), primary_key=True),
    sa.Column("t", sa.Float, primary_key=True),
    sa.Column("cpu_user", sa.Float),
    sa.Column("cpu_system", sa.Float),
    sa.Column("cpu_iowait", sa.Float),
    sa.Column("cpu_idle", sa.Float),
    sa.Column("disk_read_bytes", sa.Float),
    sa.Column("disk_write_bytes", sa.Float),
    sa.Column("server_cpu_share", sa.Float),
    sa.Column("server_read_bytes", sa.Float),
    sa.Column("server_write_bytes", sa.Float),
)
# Settings knoblab changed on a server it does not own, with their original values: written
# before the change, so a restore is possible after any crash (`knoblab restore`).
saved_settings = sa.Table(
    "saved_settings", metadata,
    sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id"), primary_key=True),
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("server", sa.Text, nullable=False),  # JSON: how to reach it, never a password
    sa.Column("original", sa.Text),  # NULL when the server's value was NULL
    sa.Column("status", sa.String(16), nullable=False),  # changed, restored, unchanged, forgotten
    sa.Column("saved_at", sa.Float, nullable=False),
    sa.Column("restored_at", sa.Float),
)
# Who measures a run now: one row per run being measured. Taking it is an INSERT, which the
# database makes atomic (SQLite and PostgreSQL alike), so two processes never measure one run.
run_locks = sa.Table(
    "run_locks", metadata,
    sa.Column("run_id", sa.String(32), primary_key=True),
    sa.Column("token", sa.String(32), nullable=False),
    sa.Column("host", sa.Text, nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("acquired_at", sa.Float, nullable=False),
    sa.Column("heartbeat_at", sa.Float, nullable=False),  # renewed while it measures
)
OS_FIELDS = tuple(c.name for c in os_seconds.columns if c.name not in ("trial_id", "t"))
SECOND_FIELDS = ("threads", "tps", "qps", "reads", "writes", "other", "latency_ms", "errors",
                 "reconnects")


class TrialState(StrEnum):
    """A trial's life: running until it ends done or failed; discarded when interrupted (a
    resumed run measures it again)."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    DISCARDED = "discarded"


@dataclass(frozen=True)
class Trial:
    id: int
    point_idx: int
    repetition: int
    position: int
    status: TrialState
    value: float | None
    effective: dict[str, str]
    details: dict[str, Any]
    error: str | None
    seconds: float = 0.0  # from its start to its end: configuring the server and measuring
    started: float = 0.0  # when it began (epoch seconds)


@dataclass(frozen=True)
class RunInfo:
    """What a run is (`runs.info`): written once by the runner, read back by resume and the
    results. Runs stored by older versions lack keys; their defaults are supplied here, once."""

    knobs: list[str] = field(default_factory=list)  # the columns of the report: swept names
    defaults: dict[str, str | None] = field(default_factory=dict)  # the baseline values
    base: dict[str, str] = field(default_factory=dict)  # [server.config], normalised
    dataset: dict[str, Any] = field(default_factory=dict)
    tied: dict[str, str] = field(default_factory=dict)
    workload: dict[str, Any] = field(default_factory=lambda: {"kind": "query"})
    steady: dict[str, Any] | None = None
    statistics: Statistics = Statistics()
    servers: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any] | None] | None = None  # per point, in a steps run
    one_at_a_time: bool = False
    unavailable: dict[str, str] = field(default_factory=dict)  # point index (text) -> why
    warnings: list[str] = field(default_factory=list)
    spec_dir: str | None = None
    owner: dict[str, Any] = field(default_factory=dict)  # pid and host measuring it
    # Adaptive repetitions: why the run stopped ("decided", "budget", "ceiling") after how
    # many rounds; None for fixed repetitions and runs still going.
    stopped: dict[str, Any] | None = None
    # How the points were measured: {"name": "blocked" | "restarts", "why": "..."}
    design: dict[str, str] | None = None
    # The machine measured on (knoblab.machine.describe); empty in runs made before it was kept.
    machine: dict[str, str] = field(default_factory=dict)
    knoblab_version: str = ""  # of the knoblab that measured it
    schema_version: int = SCHEMA_VERSION

    @property
    def kind(self) -> str:
        """The workload kind's name."""
        return str(self.workload.get("kind", "query"))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunInfo:
        known = {f.name for f in fields(cls)}
        found = {k: v for k, v in data.items() if k in known}
        statistics = {k: v for k, v in (data.get("statistics") or {}).items()
                      if k in {f.name for f in fields(Statistics)}}
        found["statistics"] = Statistics(**statistics)
        found.setdefault("schema_version", 1)
        return cls(**found)

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": self.schema_version,
                **{k: v for k, v in asdict(self).items() if k != "schema_version"}}


def _create_tables(engine: sa.Engine) -> None:
    """The schema, made by whichever process opens a new store first. Several processes may
    open it at the same moment (a run and its resume, several machines): one that finds a
    table made between its check and its CREATE looks again instead of failing."""
    for attempt in range(5):
        try:
            metadata.create_all(engine)
            return
        except (sa.exc.OperationalError, sa.exc.ProgrammingError,
                sa.exc.IntegrityError) as exc:
            if "already exists" not in str(exc) and "duplicate" not in str(exc).lower() \
                    or attempt == 4:
                raise
            time.sleep(0.05 * (attempt + 1))


def default_url(home: Path) -> str:
    return f"sqlite:///{home / 'knoblab.sqlite'}"


def driver_url(url: str) -> str:
    """A plain postgresql:// URL means psycopg 3, the driver knoblab installs."""
    for plain in ("postgresql://", "postgres://"):
        if url.startswith(plain):
            return "postgresql+psycopg://" + url[len(plain):]
    return url


class Store:
    def __init__(self, url: str) -> None:
        url = driver_url(url)
        try:
            self.engine = sa.create_engine(url, pool_pre_ping=True)
            _create_tables(self.engine)
        except (sa.exc.SQLAlchemyError, ValueError, ImportError) as exc:
            raise UserError(f"cannot open the results store {safe_url(url)}: "
                            f"{str(exc).splitlines()[0]}") from None

    # --- write side ---------------------------------------------------------------------------

    def create_run(self, *, name: str, kind: str, spec_source: str, server_binary: str,
                   server_version: str, info: RunInfo,
                   point_list: list[tuple[dict[str, str], dict[str, str]]]) -> str:
        run_id = uuid.uuid4().hex[:8]
        with self.engine.begin() as conn:
            conn.execute(runs.insert().values(
                id=run_id, name=name, kind=kind, status="running", created_at=time.time(),
                host=socket.gethostname(), spec_source=spec_source, server_binary=server_binary,
                server_version=server_version,
                info=json.dumps(info.to_json()),
            ))
            conn.execute(points.insert(), [
                {"run_id": run_id, "idx": i, "requested": json.dumps(req),
                 "config": json.dumps(cfg)}
                for i, (req, cfg) in enumerate(point_list)
            ])
        return run_id

    def begin_trial(self, run_id: str, *, point_idx: int, repetition: int,
                    position: int) -> int:
        """A trial row in status "running": per-second data can refer to it at once."""
        with self.engine.begin() as conn:
            result = conn.execute(trials.insert().values(
                run_id=run_id, point_idx=point_idx, repetition=repetition, position=position,
                status=TrialState.RUNNING, started_at=time.time(), finished_at=time.time(),
            ))
            key = result.inserted_primary_key
            if key is None:  # only without a compiled single-row insert; this one always is
                raise RuntimeError("the database returned no id for the new trial")
            return int(key[0])

    def add_second(self, trial_id: int, t: float, **values: float) -> None:
        with self.engine.begin() as conn:
            conn.execute(seconds.insert().values(trial_id=trial_id, t=t, **values))

    def add_os_second(self, trial_id: int, t: float, figures: dict[str, float]) -> None:
        with self.engine.begin() as conn:
            conn.execute(os_seconds.insert().values(
                trial_id=trial_id, t=t, **{k: figures.get(k) for k in OS_FIELDS}))

    def finish_trial(self, trial_id: int, *, status: TrialState, value: float | None = None,
                     effective: dict[str, str] | None = None,
                     details: dict[str, Any] | None = None, error: str | None = None) -> None:
        with self.engine.begin() as conn:
            conn.execute(trials.update().where(trials.c.id == trial_id).values(
                status=status, finished_at=time.time(), value=value,
                effective=json.dumps(effective or {}), details=json.dumps(details or {}),
                error=error,
            ))

    def discard_unfinished(self, run_id: str) -> int:
        """Trials left "running" by a process that died: not measurements, mark them so."""
        with self.engine.begin() as conn:
            result = conn.execute(trials.update().where(
                (trials.c.run_id == run_id) & (trials.c.status == TrialState.RUNNING)
            ).values(status=TrialState.DISCARDED, error="knoblab stopped during this trial"))
            return result.rowcount

    def set_status(self, run_id: str, status: str, error: str | None = None) -> None:
        finished = time.time() if status != "running" else None
        with self.engine.begin() as conn:
            conn.execute(runs.update().where(runs.c.id == run_id).values(
                status=status, finished_at=finished, error=error))

    def update_info(self, run_id: str, **items: Any) -> None:
        info = self.run(run_id)["info"]
        info.update(items)
        with self.engine.begin() as conn:
            conn.execute(runs.update().where(runs.c.id == run_id).values(info=json.dumps(info)))

    def save_original(self, run_id: str, server: dict[str, Any], name: str,
                      original: str | None) -> None:
        """Record a setting's original value before knoblab first changes it (once per run)."""
        with self.engine.begin() as conn:
            found = conn.execute(sa.select(saved_settings.c.name).where(
                (saved_settings.c.run_id == run_id) & (saved_settings.c.name == name))).first()
            if found is None:
                conn.execute(saved_settings.insert().values(
                    run_id=run_id, name=name, server=json.dumps(server, sort_keys=True),
                    original=original, status="changed", saved_at=time.time()))
            else:
                conn.execute(saved_settings.update().where(
                    (saved_settings.c.run_id == run_id) & (saved_settings.c.name == name)
                ).values(status="changed", restored_at=None))

    def lock_run(self, run_id: str, gone: Callable[[dict[str, Any]], bool]) -> str:
        """Take the run for this process; a token to renew and release it with. A holder
        for which `gone(holder)` is true (a dead process, a silent machine) is replaced;
        any other makes this a UserError."""
        token = uuid.uuid4().hex
        for _ in range(3):
            now = time.time()
            try:
                with self.engine.begin() as conn:
                    conn.execute(run_locks.insert().values(
                        run_id=run_id, token=token, host=socket.gethostname(),
                        pid=os.getpid(), acquired_at=now, heartbeat_at=now))
                return token
            except sa.exc.IntegrityError:
                pass
            with self.engine.begin() as conn:
                holder = conn.execute(run_locks.select().where(
                    run_locks.c.run_id == run_id)).mappings().first()
                if holder is None:
                    continue  # released meanwhile
                if not gone(dict(holder)):
                    raise UserError(f"run {run_id} is still being measured by process "
                                    f"{holder['pid']} on {holder['host']}; wait for it, or "
                                    "stop it (Ctrl-C) and resume then")
                # Only that holder's row: if another process replaced it first, it wins.
                conn.execute(run_locks.delete().where(
                    (run_locks.c.run_id == run_id) & (run_locks.c.token == holder["token"])))
        raise UserError(f"run {run_id} is being taken over by another process; try again")

    def holders_on(self, host: str) -> list[int]:
        """Processes on `host` measuring a run of this store now (or left a claim behind)."""
        with self.engine.connect() as conn:
            return [int(pid) for pid in conn.execute(sa.select(run_locks.c.pid).where(
                run_locks.c.host == host)).scalars()]

    def renew_lock(self, run_id: str, token: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(run_locks.update().where(
                (run_locks.c.run_id == run_id) & (run_locks.c.token == token)
            ).values(heartbeat_at=time.time()))

    def unlock_run(self, run_id: str, token: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(run_locks.delete().where(
                (run_locks.c.run_id == run_id) & (run_locks.c.token == token)))

    def mark_restored(self, run_id: str, names: list[str], status: str = "restored") -> None:
        """Settings no longer pending: put back ("restored"), never really changed ("unchanged":
        the server refused the change), or given up by the user ("forgotten")."""
        with self.engine.begin() as conn:
            conn.execute(saved_settings.update().where(
                (saved_settings.c.run_id == run_id) & saved_settings.c.name.in_(names)
            ).values(status=status, restored_at=time.time()))

    def pending_restores(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Settings still changed: by a run that was killed, or whose restore failed."""
        query = saved_settings.select().where(saved_settings.c.status == "changed")
        if run_id is not None:
            query = query.where(saved_settings.c.run_id == run_id)
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(saved_settings.c.saved_at)).mappings().all()
        return [{**dict(r), "server": json.loads(r["server"])} for r in rows]

    # --- read side ----------------------------------------------------------------------------

    def run(self, run_id: str) -> dict[str, Any]:
        """A run by its id, a unique beginning of it, or "latest" (the newest run)."""
        with self.engine.connect() as conn:
            if run_id == "latest":
                row = conn.execute(runs.select().order_by(runs.c.created_at.desc())
                                   .limit(1)).mappings().first()
                if row is None:
                    raise UserError("the store holds no run yet; start one with: knoblab run "
                                    "SPEC")
            else:
                row = conn.execute(runs.select().where(runs.c.id == run_id)).mappings().first()
            if row is None:
                matches = conn.execute(sa.select(runs.c.id).where(
                    runs.c.id.startswith(run_id, autoescape=True))).scalars().all()
                if len(matches) == 1:
                    return self.run(matches[0])
                if matches:
                    shown = ", ".join(sorted(matches)[:5]) + (", …" if len(matches) > 5 else "")
                    raise UserError(f"run {run_id!r} is ambiguous: it begins {len(matches)} "
                                    f"runs ({shown}); give more of the id")
                raise UserError(f"no run {run_id!r} in the store; list runs with: knoblab runs")
        result = dict(row)
        result["info"] = json.loads(result["info"] or "{}")
        return result

    def points(self, run_id: str) -> list[tuple[dict[str, str], dict[str, str]]]:
        with self.engine.connect() as conn:
            rows = conn.execute(points.select().where(points.c.run_id == run_id)
                                .order_by(points.c.idx)).mappings().all()
        return [(json.loads(r["requested"]), json.loads(r["config"])) for r in rows]

    def trials(self, run_id: str) -> list[Trial]:
        with self.engine.connect() as conn:
            rows = conn.execute(trials.select().where(trials.c.run_id == run_id)
                                .order_by(trials.c.position, trials.c.id)).mappings().all()
        return [Trial(r["id"], r["point_idx"], r["repetition"], r["position"],
                      TrialState(r["status"]), r["value"], json.loads(r["effective"] or "{}"),
                      json.loads(r["details"] or "{}"), r["error"],
                      max(0.0, (r["finished_at"] or 0.0) - (r["started_at"] or 0.0)),
                      r["started_at"] or 0.0)
                for r in rows]

    def seconds(self, run_id: str) -> dict[int, list[dict[str, float]]]:
        """Per-second workload reports of a run's trials, by trial id, in time order."""
        return self._per_second(seconds, SECOND_FIELDS, run_id)

    def os_seconds(self, run_id: str) -> dict[int, list[dict[str, float]]]:
        """The OS figures of every second, by trial id, in time order."""
        return self._per_second(os_seconds, OS_FIELDS, run_id)

    def _per_second(self, table: sa.Table, fields: tuple[str, ...],
                    run_id: str) -> dict[int, list[dict[str, float]]]:
        query = (sa.select(table).join(trials, trials.c.id == table.c.trial_id)
                 .where(trials.c.run_id == run_id).order_by(table.c.trial_id, table.c.t))
        by_trial: dict[int, list[dict[str, float]]] = {}
        with self.engine.connect() as conn:
            for row in conn.execute(query).mappings():
                by_trial.setdefault(row["trial_id"], []).append(
                    {k: row[k] for k in ("t", *fields)})
        return by_trial

    def list_runs(self, limit: int | None = 20, name: str | None = None) -> list[dict[str, Any]]:
        """The newest runs first; `name`: only runs whose name contains it."""
        query = runs.select().order_by(runs.c.created_at.desc())
        if name:
            query = query.where(runs.c.name.contains(name, autoescape=True))
        with self.engine.connect() as conn:
            rows = conn.execute(query.limit(limit)).mappings().all()
        return [dict(r) for r in rows]


def safe_url(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "(unparseable URL)"
