"""The store's schema: its tables (one layout for SQLite and PostgreSQL), the versions that
say which knoblab made a store, and a trial as a row."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, fields
from typing import Any

import sqlalchemy as sa

from knoblab.seconds import Second
from knoblab.vocabulary import TrialState

SCHEMA_VERSION = 1


# The layout of the tables below; raised when a change would mislead an older knoblab, which
# then refuses the store instead of misreading it.
STORE_VERSION = 1


MAX_ROWS = 2**63 - 1  # the largest LIMIT SQLite and PostgreSQL accept


metadata = sa.MetaData()


runs = sa.Table(
    "runs", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),  # the experiment (vocabulary.Experiment)
    sa.Column("status", sa.String(16), nullable=False),  # vocabulary.RunStatus
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


# Per-second reports of time-series workloads (sysbench), stored as each second arrives: a
# column for each field of the report (`knoblab.seconds.Second`; `t`, seconds since the
# workload started, is the key with the trial).
seconds = sa.Table(
    "seconds", metadata,
    sa.Column("trial_id", sa.Integer, sa.ForeignKey("trials.id"), primary_key=True),
    sa.Column("t", sa.Float, primary_key=True),
    *(sa.Column(f.name, sa.Integer if f.type in ("int", int) else sa.Float)
      for f in fields(Second) if f.name != "t"),
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


# What marks a database as knoblab's store, and by which layout: written when knoblab makes
# the store. Kept apart from `metadata` so that opening a store made before it was introduced
# writes nothing (reading an old store, even a read-only one, leaves it as it was).
marker_metadata = sa.MetaData()


store_marker = sa.Table(
    "knoblab_store", marker_metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),  # the one row: 1
    sa.Column("version", sa.Integer, nullable=False),  # STORE_VERSION of its maker
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("created_by", sa.Text),  # knoblab's version
)


# A tuning study as `knoblab tune` left it: one row per study, for `knoblab runs` (its trials,
# the best so far, its status) and `knoblab report study:NAME` (its result, re-rendered
# without measuring). Its runs carry its name in runs.info. Made by the first study written,
# not when a store is opened: an older store stays readable where it cannot be written.
study_metadata = sa.MetaData()


studies = sa.Table(
    "studies", study_metadata,
    sa.Column("id", sa.String(64), primary_key=True),  # the name's digest: any name, any length
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),  # running, done, failed, interrupted
    sa.Column("created_at", sa.Float, nullable=False),  # the study's first start
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.Column("finished_at", sa.Float),
    sa.Column("host", sa.Text),
    sa.Column("spec_source", sa.Text, nullable=False),
    sa.Column("info", sa.Text),  # JSON: owner, machine, server, progress, summary
    sa.Column("result", sa.Text),  # JSON: the study's result as its report was made from it
    sa.Column("error", sa.Text),
)


OS_FIELDS = tuple(c.name for c in os_seconds.columns if c.name not in ("trial_id", "t"))


SECOND_FIELDS = tuple(c.name for c in seconds.columns if c.name not in ("trial_id", "t"))


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


def _create_tables(engine: sa.Engine, tables: sa.MetaData = metadata) -> None:
    """The schema, made by whichever process opens a new store first. Several processes may
    open it at the same moment (a run and its resume, several machines): one that finds a
    table made between its check and its CREATE, or the file locked by the other's CREATE,
    looks again instead of failing."""
    for attempt in range(5):
        try:
            tables.create_all(engine)
            return
        except (sa.exc.OperationalError, sa.exc.ProgrammingError,
                sa.exc.IntegrityError) as exc:
            text = str(exc).lower()
            if not any(w in text for w in ("already exists", "duplicate", "locked")) \
                    or attempt == 4:
                raise
            time.sleep(0.05 * (attempt + 1))


def study_key(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:64]


def _not_ours(names: set[str], columns: dict[str, set[str]]) -> str | None:
    """Why a database with these tables (and these columns of knoblab's table names) is not
    knoblab's store, or None: an empty one, or one with knoblab's tables, is."""
    for name in sorted(columns):
        missing = {c.name for c in metadata.tables[name].columns} - columns[name]
        if missing:
            shown = ", ".join(sorted(missing)[:3]) + (", …" if len(missing) > 3 else "")
            return f"its table {name!r} is another program's, without {shown}"
    others = sorted(names - set(metadata.tables) - {store_marker.name, studies.name})
    if others and not columns:
        shown = ", ".join(others[:5]) + (", …" if len(others) > 5 else "")
        return f"it holds another program's tables: {shown}"
    return None
