"""Where every measurement goes the moment it exists: SQLite by default, any SQLAlchemy URL.

Write side: create a run, record each trial as it finishes, mark the run's status.
Read side: a run, its points and its trials — everything reports are built from.
A run is resumable: its plan is derived from the stored spec and seed, and trials already
stored as done (or failed) are not repeated.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import re
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, unquote

import sqlalchemy as sa

from knoblab import __version__
from knoblab.errors import RunBusy, UserError
from knoblab.stats import Statistics
from knoblab.vocabulary import Experiment, RunStatus, TrialState

SCHEMA_VERSION = 1
# The layout of the tables below; raised when a change would mislead an older knoblab, which
# then refuses the store instead of misreading it.
STORE_VERSION = 1
# How long SQLite waits for another process's lock before a statement gives up, and how long
# a statement that failed for a passing reason (a lock, a lost connection) is tried again.
LOCK_WAIT = 30.0
RETRY_FOR = 60.0
# Less free space than this where a SQLite store lies, and a run is refused before it starts.
MIN_FREE = 1 << 20
MAX_ROWS = 2**63 - 1  # the largest LIMIT SQLite and PostgreSQL accept
T = TypeVar("T")
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
SECOND_FIELDS = ("threads", "tps", "qps", "reads", "writes", "other", "latency_ms", "errors",
                 "reconnects")


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
    # Adaptive repetitions: why the run stopped ("decided", "budget", "ceiling", "futile") after how
    # many rounds; None for fixed repetitions and runs still going.
    stopped: dict[str, Any] | None = None
    # How the points were measured: {"name": "blocked" | "restarts", "why": "..."}
    design: dict[str, str] | None = None
    # The machine measured on (knoblab.machine.describe); empty in runs made before it was kept.
    machine: dict[str, str] = field(default_factory=dict)
    knoblab_version: str = ""  # of the knoblab that measured it
    study: str | None = None  # the tuning study it was measured for (a trial, a validation)
    # Cores other programs kept busy on the average while it ran (a tune's validations)
    others_load: float | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def workload_kind(self) -> str:
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


class Damaged(Exception):
    """What is wrong with a stored row (a damaged or hand-edited store), as a clause."""


def _text(value: Any, what: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise Damaged(f"its {what} is {_kind_of(value)}, not text")
    return value


def _number(value: Any, what: str, *, optional: bool = False, whole: bool = False) -> Any:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
        raise Damaged(f"its {what} is {_kind_of(value)}, not a "
                      f"{'whole number' if whole else 'number'}")
    if not math.isfinite(value):
        raise Damaged(f"its {what} is {value}, not a finite number")
    return value


def _kind_of(value: Any) -> str:
    if value is None:
        return "missing"
    if isinstance(value, bytes | memoryview):
        return "raw bytes"
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def _object(text: Any, what: str, *, empty: str = "{}") -> dict[str, Any]:
    """A stored JSON object (None: `empty`)."""
    if text is None:
        text = empty
    if not isinstance(text, str):
        raise Damaged(f"its {what} is {_kind_of(text)}, not JSON text")
    try:
        data = json.loads(text)
    except ValueError:
        raise Damaged(f"its {what} is not the JSON knoblab wrote") from None
    if not isinstance(data, dict):
        raise Damaged(f"its {what} is {_kind_of(data)}, not a JSON object")
    return data


def _names_to_text(data: dict[str, Any], what: str, *, optional: bool = False) -> None:
    for key, value in data.items():
        if not isinstance(key, str) or not (isinstance(value, str) or
                                            (optional and value is None)):
            raise Damaged(f"its {what} maps {_kind_of(key)} to {_kind_of(value)}")


RUN_STATES = frozenset(RunStatus) - {RunStatus.KILLED}  # killed is never stored
# RunInfo's fields by the JSON type each must have (None allowed where the field is optional).
_INFO_TYPES: dict[str, tuple[type, ...]] = {
    "knobs": (list,), "defaults": (dict,), "base": (dict,), "dataset": (dict,),
    "tied": (dict,), "workload": (dict,), "steady": (dict, type(None)),
    "statistics": (dict,), "servers": (list,), "steps": (list, type(None)),
    "one_at_a_time": (bool,), "unavailable": (dict,), "warnings": (list,),
    "spec_dir": (str, type(None)), "owner": (dict,), "stopped": (dict, type(None)),
    "design": (dict, type(None)), "machine": (dict,), "knoblab_version": (str,),
    "study": (str, type(None)), "schema_version": (int,),
}


def check_info(data: Any) -> None:
    """A run's description (`runs.info`) as knoblab writes it, or Damaged naming what is not:
    every field of the type RunInfo gives it, so that no reader meets a surprise."""
    if not isinstance(data, dict):
        raise Damaged(f"its description is {_kind_of(data)}, not a JSON object")
    for name, types in _INFO_TYPES.items():
        if name in data and not isinstance(data[name], types):
            raise Damaged(f"its description's {name} is {_kind_of(data[name])}")
    if not all(isinstance(k, str) for k in data.get("knobs", [])):
        raise Damaged("its description's knobs are not all names")
    if not all(isinstance(w, str) for w in data.get("warnings", [])):
        raise Damaged("its description's warnings are not all text")
    if not all(isinstance(s, dict) for s in data.get("servers", [])):
        raise Damaged("its description's servers are not all objects")
    if not all(s is None or isinstance(s, dict) for s in data.get("steps") or []):
        raise Damaged("its description's steps are not all objects")
    _names_to_text(data.get("defaults", {}), "description's defaults", optional=True)
    _names_to_text(data.get("base", {}), "description's base settings")
    _names_to_text(data.get("tied", {}), "description's tied settings")
    _names_to_text(data.get("unavailable", {}), "description's unavailable points")
    if not all(k.isdigit() for k in data.get("unavailable", {})):
        raise Damaged("its description's unavailable points are not point numbers")
    statistics = data.get("statistics", {})
    for f in fields(Statistics):
        if f.name in statistics:
            value = statistics[f.name]
            if isinstance(f.default, str):
                _text(value, f"statistics' {f.name}")
            else:
                _number(value, f"statistics' {f.name}", whole=isinstance(f.default, int))
    if not 0 < statistics.get("confidence", 0.5) < 1 or not 0 < statistics.get("alpha", 0.5) < 1 \
            or statistics.get("min_effect", 0) < 0:
        raise Damaged("its description's statistics are out of range (a confidence or alpha "
                      "not between 0 and 1, or a negative min_effect)")
    if statistics.get("test", "welch-log") not in ("welch-log", "welch", "mann-whitney"):
        raise Damaged(f"its description names a test knoblab does not know "
                      f"({_kind_of(statistics['test'])})")
    for step in data.get("steps") or []:
        if step is not None and not (isinstance(step.get("step"), int) and
                                     isinstance(step.get("role"), str) and
                                     isinstance(step.get("change"), dict) and
                                     isinstance(step.get("label"), str)):
            raise Damaged(f"its description's step {_kind_of(step)} is not a step")
    owner = data.get("owner", {})
    _number(owner.get("pid"), "owner's process id", optional=True, whole=True)
    _text(owner.get("host"), "owner's host", optional=True)


# A study's description (`studies.info`) by the JSON type of each field.
_STUDY_INFO_TYPES: dict[str, tuple[type, ...]] = {
    "owner": (dict,), "machine": (dict,), "knoblab_version": (str,), "trials": (int,),
    "total": (int,), "best": (str,), "server": (str,), "summary": (str,),
    "spent": (int, float),
}


def checked_study(row: Any) -> dict[str, Any]:
    """A `studies` row as a record, `info` read (an object), or Damaged naming what is not."""
    study = dict(row)
    for column in ("name", "status", "spec_source"):
        _text(study[column], column if column != "spec_source" else "spec")
    for column in ("host", "error"):
        _text(study[column], column, optional=True)
    _number(study["created_at"], "start time")
    _number(study["updated_at"], "time of its last change")
    _number(study["finished_at"], "end time", optional=True)
    info = study["info"] = _object(study["info"], "description")
    for name, types in _STUDY_INFO_TYPES.items():
        if name in info and (not isinstance(info[name], types) or isinstance(info[name], bool)
                             or (isinstance(info[name], float) and not math.isfinite(info[name]))):
            raise Damaged(f"its description's {name} is {_kind_of(info[name])}")
    owner = info.get("owner", {})
    _number(owner.get("pid"), "owner's process id", optional=True, whole=True)
    _text(owner.get("host"), "owner's host", optional=True)
    if study["result"] is not None:
        study["result"] = _object(study["result"], "result")
    return study


# A measurement's details (`trials.details`) by the shape of each field readers use: a number,
# text, an object of numbers or of texts, a list of numbers (None: also absent as null).
_DETAIL_NUMBERS = frozenset({
    "cached_before", "client_cpu_seconds", "copy_seconds", "cpu_seconds", "cpu_share",
    "errors", "iowait_share", "iterations_per_second", "latency_avg_ms", "latency_max_ms",
    "latency_p95_ms", "latency_p99_ms", "read_bytes", "reconnects", "rows", "start_seconds",
    "statements", "statements_per_iteration", "sysbench_tps", "threads", "transactions",
    "write_bytes"})
_DETAIL_SHAPES = {"regime": "text", "session": "texts", "filesystem": "texts",
                  "os": "numbers", "status": "numbers", "steady": "numbers", "runs": "list",
                  "per_connection_seconds": "list"}


def check_details(details: dict[str, Any], what: str) -> None:
    """A measurement's details as knoblab writes them, or Damaged naming the first field that
    is not (fields knoblab does not read are left as they are)."""
    for key, value in details.items():
        shape = "number" if key in _DETAIL_NUMBERS else _DETAIL_SHAPES.get(key)
        if shape is None or value is None:
            continue
        if shape == "number":
            _number(value, f"{what}'s detail {key}")
        elif shape == "text":
            _text(value, f"{what}'s detail {key}")
        elif shape == "list":
            if not isinstance(value, list):
                raise Damaged(f"its {what}'s detail {key} is {_kind_of(value)}, not a list")
            for item in value:
                _number(item, f"{what}'s detail {key}")
        else:
            if not isinstance(value, dict):
                raise Damaged(f"its {what}'s detail {key} is {_kind_of(value)}, not an object")
            for name, item in value.items():
                if shape == "texts":
                    _text(item, f"{what}'s detail {key}.{name}", optional=True)
                else:
                    _number(item, f"{what}'s detail {key}.{name}", optional=True)


def checked_run(row: Any) -> dict[str, Any]:
    """A `runs` row as a record: every column of the type knoblab writes, `info` read (an
    object), or Damaged naming the first column that is not."""
    run = dict(row)
    for column in ("id", "name", "kind", "status", "spec_source"):
        _text(run[column], column if column != "spec_source" else "spec")
    for column in ("host", "server_binary", "server_version", "error"):
        _text(run[column], column.replace("_", " "), optional=True)
    if run["status"] not in RUN_STATES:
        raise Damaged(f"its status is {_kind_of(run['status'])}, a state knoblab does not know")
    _number(run["created_at"], "start time")
    _number(run["finished_at"], "end time", optional=True)
    run["info"] = _object(run["info"], "description")
    check_info(run["info"])
    return run


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


# --- URLs ------------------------------------------------------------------------------------

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://(.*)", re.DOTALL)
# A password in a URL: from the user name's colon to the last "@" before another URL begins.
_PASSWORD = re.compile(r"([A-Za-z][\w+.-]*://[^\s:/@]*):(?:(?!\s\S*://)[^\n])*@")
_QUERY_PASSWORD = re.compile(r"([?&](?:ssl)?pass(?:word|wd)=)[^&\s]*", re.IGNORECASE)
_PERCENT_HINT = ("percent-encode the user name and password (@ as %40, : as %3A, / as %2F, "
                 "# as %23, % as %25), or leave the password out and give it in PGPASSWORD "
                 "or ~/.pgpass")


def storable(text: str | None) -> str | None:
    """A message as the store can keep it: bytes of a log or a name that were not UTF-8 (kept
    as lone surrogates) written as escapes, which no database encoding refuses."""
    if text is None or text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def hide_passwords(text: str) -> str:
    """`text` (a command line, a traceback) with the password of every URL in it masked."""
    return _QUERY_PASSWORD.sub(r"\1***", _PASSWORD.sub(r"\1:***@", text))


def _masked(text: str) -> str:
    """A URL that could not be read, for a message: everything before its last "@" (where a
    user name and password would be) hidden."""
    head, at, tail = text.rpartition("@")
    if not at:
        return hide_passwords(text)
    scheme = re.match(r"[A-Za-z][\w+.-]*:/*", head)
    return hide_passwords(f"{scheme.group(0) if scheme else ''}***@{tail}")


def parse_url(url: str | sa.URL, what: str = "the results store") -> sa.URL:
    """A database URL as the user meant it, or a UserError naming what is wrong in it without
    ever showing its password. The user name and password end at the one "@" (anything may
    stand in them but "@"; %XX is decoded there, as in any URL); `what` names the URL's role
    in messages."""
    if isinstance(url, sa.URL):
        return url
    text = url.strip()
    found = _SCHEME.fullmatch(text)
    if found is None:
        raise UserError(f"{what}: {_masked(text)!r} is not a database URL; give "
                        "sqlite:///PATH or postgresql://USER@HOST/DATABASE")
    scheme, rest = found.groups()
    if scheme.split("+")[0] == "sqlite":
        options = rest.partition("?")[2]
        if "?" in rest and not all("=" in o for o in options.split("&")):
            raise UserError(f"{what}: in {text}, a '?' in the path begins options; write a "
                            "'?' that is part of the path as %3F")
        parsed_sqlite = sa.engine.make_url(text)
        _not_a_mistaken_absolute_path(parsed_sqlite, text, what)
        return parsed_sqlite
    user = password = None
    if "@" in rest:
        if rest.count("@") > 1:
            raise UserError(f"{what}: the URL {_masked(text)} holds more than one '@', so "
                            f"where its password ends is unclear: {_PERCENT_HINT}")
        credentials, rest = rest.split("@")
        name, colon, secret = credentials.partition(":")
        user, password = unquote(name), unquote(secret) if colon else None
    shown = f"{scheme}://{'***@' if user is not None else ''}{rest}"
    host_port = re.match(r"(\[[^\]]*\]|[^/:?]*)(?::([^/?]*))?", rest)
    port = host_port.group(2) if host_port else None
    if "," in (host_port.group(0) if host_port else ""):
        raise UserError(f"{what}: the URL {shown} names several hosts; give them as options "
                        "instead: ...@/DATABASE?host=HOST1:PORT1&host=HOST2:PORT2")
    if port and not port.isdigit():
        raise UserError(f"{what}: in the URL {shown}, the port {port!r} is not a number")
    if port and not 1 <= int(port) <= 65535:
        raise UserError(f"{what}: in the URL {shown}, port {port} is out of range: give 1 to "
                        "65535")
    try:
        parsed = sa.engine.make_url(f"{scheme}://{rest}")
    except (sa.exc.ArgumentError, ValueError):
        raise UserError(f"{what}: {shown!r} is not a database URL; give sqlite:///PATH or "
                        "postgresql://USER@HOST/DATABASE") from None
    return parsed.set(username=user, password=password) if user is not None else parsed


def _not_a_mistaken_absolute_path(url: sa.URL, text: str, what: str) -> None:
    """sqlite:///PATH names PATH relative to the current folder (SQLAlchemy's and Optuna's
    convention; sqlite:////PATH is absolute). A relative path whose first folder is missing
    here but exists under / (sqlite:///tmp/x) was meant absolute: said, before a store or a
    study lands in a folder nobody looks in, or a missing one is blamed."""
    database = url.database or ""
    if in_memory(url) or database.startswith(("/", "file:")):
        return
    first, _, rest = database.partition("/")
    if not rest or first in ("", ".", ".."):
        return
    if not os.path.lexists(first) and os.path.isdir(os.path.join("/", first)):
        raise UserError(f"{what}: {_masked(text)} names {database} relative to the current "
                        f"folder (three slashes: a relative path); for /{database} write "
                        f"sqlite:////{database}")


def _with_driver(url: sa.URL) -> sa.URL:
    """A plain postgresql:// URL means psycopg 3, the driver knoblab installs."""
    if url.drivername in ("postgresql", "postgres"):
        return url.set(drivername="postgresql+psycopg")
    return url


def driver_url(url: str, what: str = "the database") -> str:
    """The URL to give SQLAlchemy (and Optuna): read as `parse_url` does, with its driver."""
    return _with_driver(parse_url(url, what)).render_as_string(hide_password=False)


def safe_url(url: str | sa.URL) -> str:
    """The URL without its password, for messages."""
    try:
        parsed = parse_url(url)
    except UserError:
        return _masked(url) if isinstance(url, str) else "(a database URL)"
    return hide_passwords(parsed.render_as_string(hide_password=True))


def sqlite_url(path: Path) -> str:
    """The URL of a SQLite file, whatever its path holds (?, %, #, spaces)."""
    return sa.URL.create("sqlite", database=str(path)).render_as_string()


def default_url(home: Path) -> str:
    return sqlite_url(home / "knoblab.sqlite")


KINDS = ("a SQLite file (sqlite:///PATH) or a PostgreSQL database "
         "(postgresql://USER@HOST/DATABASE)")


def _check_kind(url: sa.URL, shown: str) -> None:
    """Only a store that keeps what is written in it, in a database knoblab supports: a
    SQLite file, or PostgreSQL (MySQL and MariaDB keep FLOAT in single precision, and the
    driver may be missing)."""
    backend = url.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise UserError(f"cannot open the results store {shown}: knoblab keeps its results "
                        f"in {KINDS}, not in {backend}")
    if names_no_database(url):
        # Without one, the server's default database for the user would take the tables.
        raise UserError(f"the results store {shown} names no database; name one of its own: "
                        "postgresql://USER@HOST/DATABASE")
    if in_memory(url):
        raise UserError(f"the results store {shown} is in memory: every measurement would be "
                        "lost when knoblab exits; give a file (sqlite:///PATH)")


def names_no_database(url: sa.URL) -> bool:
    """A server's URL (not SQLite's) that names no database: its tables would go into the
    server's default database for the user."""
    return url.get_backend_name() != "sqlite" and not url.database and \
        not url.query.get("dbname")


def in_memory(url: sa.URL) -> bool:
    """A SQLite URL of a database in memory, which is gone when the process exits."""
    database = url.database or ""
    return url.get_backend_name() == "sqlite" and (
        database in ("", ":memory:") or ":memory:" in database or
        url.query.get("mode") == "memory" or "mode=memory" in database)


def _sqlite_file(url: sa.URL) -> Path | None:
    """The file of a SQLite store (None for one in memory)."""
    database = url.database or ""
    if not url.drivername.startswith("sqlite") or database in ("", ":memory:") \
            or database.startswith("file:") or url.query.get("mode") == "memory":
        return None
    return Path(os.path.abspath(database))


def _os_problem(exc: OSError) -> str:
    """What an OSError says about a place, as a clause."""
    return {errno.EROFS: "is on a read-only file system",
            errno.ENOSPC: "is on a full file system",
            errno.EDQUOT: "is over its disk quota",
            errno.EACCES: "is not writable (permission denied)",
            errno.EPERM: "is not writable (operation not permitted)",
            errno.ENOENT: "does not exist",
            errno.ENOTDIR: "is not a folder"}.get(exc.errno or 0,
                                                   (exc.strerror or str(exc)).lower())


def _try_writing(folder: Path, size: int = 0) -> OSError | None:
    """Whether a file of `size` bytes can be written in `folder` (it is removed again)."""
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".knoblab-probe-")
    except OSError as exc:
        return exc
    try:
        with os.fdopen(fd, "wb") as probe:
            probe.write(b"\0" * size)
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as exc:
        return exc
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)
    return None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0].strip() if lines else type(exc).__name__


class Store:
    """The results store. Every statement goes through `_tx`: a failure for a passing reason
    (another process's lock, a lost connection) is tried again for RETRY_FOR seconds, any
    other becomes one line (UserError) naming the store and what is wrong with it — never a
    password, never a traceback. Each write is its own transaction: what was stored stays."""

    def __init__(self, url: str | sa.URL) -> None:
        given = parse_url(url)
        _check_kind(given, hide_passwords(url.strip()) if isinstance(url, str) else
                    safe_url(given))
        self.url = _with_driver(given)
        self.path = _sqlite_file(given)
        self.name = str(self.path) if self.path else safe_url(given)
        self._secret = given.password or ""
        self._opened = False
        self._creating = False  # making knoblab's tables (not only reading them)
        self._written = False  # something this process wrote is stored
        self._gone = False  # a passing failure outlasted RETRY_FOR: no more waiting for it
        self._study: str | None = None  # runs created now are this study's (`measuring_for`)
        if self.path is not None:
            self._check_place(self.path)
        try:
            self.engine = sa.create_engine(self.url, pool_pre_ping=True,
                                           connect_args=self._connect_args())
        except (sa.exc.SQLAlchemyError, ImportError, ValueError, TypeError) as exc:
            raise UserError(f"cannot open the results store {self.name}: "
                            f"{self._scrub(_first_line(exc))}") from None
        try:
            self._prepare()
        except sa.exc.SQLAlchemyError as exc:
            raise self._failure(exc, time.monotonic(), write=self._creating) from None
        self._opened = True

    def _connect_args(self) -> dict[str, Any]:
        if self.url.drivername.startswith("sqlite"):
            return {"timeout": LOCK_WAIT}
        if self.url.drivername.startswith("postgresql") and \
                "connect_timeout" not in self.url.query:
            return {"connect_timeout": 15}  # a silent host: not the TCP timeout of minutes
        return {}

    # --- opening --------------------------------------------------------------------------------

    def _check_place(self, path: Path) -> None:
        """A SQLite store's path, checked before SQLite says only "unable to open"."""
        try:
            if path.is_dir():
                raise UserError(f"the results store {path} is a folder, not a SQLite file: "
                                f"give a file in it, e.g. {path / 'knoblab.sqlite'}")
            if path.exists():
                if not path.is_file():
                    raise UserError(f"the results store {path} is not a regular file: give "
                                    "a SQLite file's path")
                return
            folder = path.parent
            existing = next(p for p in (folder, *folder.parents) if p.exists())
        except OSError as exc:
            raise UserError(f"cannot reach the results store {path}: "
                            f"{exc.strerror or exc}") from None
        if not existing.is_dir():
            raise UserError(f"cannot create the results store {path}: {existing} is a file, "
                            "not a folder")
        if existing != folder:
            raise UserError(f"cannot create the results store {path}: its folder {folder} "
                            "does not exist (create it first)")
        if (problem := _try_writing(folder)) is not None:
            raise UserError(f"cannot create the results store {path}: its folder {folder} "
                            f"{_os_problem(problem)}")

    def _prepare(self) -> None:
        """Recognise knoblab's store (or an empty database, made one now) and refuse any
        other database before writing a byte into it."""
        with self.engine.connect() as conn:
            inspector = sa.inspect(conn)
            names = {n for n in inspector.get_table_names() if not n.startswith("sqlite_")}
            columns = {n: {c["name"] for c in inspector.get_columns(n)}
                       for n in names & set(metadata.tables)}
            version = (conn.execute(sa.select(sa.func.max(store_marker.c.version))).scalar()
                       if store_marker.name in names else None)
        if version is not None and version > STORE_VERSION:
            raise UserError(f"cannot open the results store {self.name}: a newer knoblab made "
                            f"it (store layout {version}; this knoblab {__version__} knows "
                            f"{STORE_VERSION}): use that knoblab, or another store")
        if (wrong := _not_ours(names, columns)) is not None:
            raise UserError(f"cannot open the results store {self.name}: it is not a knoblab "
                            f"results store ({wrong}); give a new file or an empty database")
        self._creating = True
        _create_tables(self.engine)
        if not columns:  # knoblab made it just now: mark it so
            _create_tables(self.engine, marker_metadata)
            try:
                with self.engine.begin() as conn:
                    conn.execute(store_marker.insert().values(
                        id=1, version=STORE_VERSION, created_at=time.time(),
                        created_by=__version__))
            except sa.exc.IntegrityError:
                pass  # another process opening it at the same moment marked it

    def check_writable(self) -> None:
        """Refuse, before anything runs, a store that can be read but not written: its folder
        or file read-only, its disk full, a database user that may only read, a standby. A
        run stores every measurement the moment it exists, so it must find out now."""
        if self.path is not None:
            folder = self.path.parent
            if (problem := _try_writing(folder, 64 << 10)) is not None:
                raise UserError(f"the results store {self.path} cannot be written: its folder "
                                f"{folder} {_os_problem(problem)}")
            try:
                os.close(os.open(self.path, os.O_WRONLY))
            except OSError as exc:
                raise UserError(f"the results store {self.path} cannot be written: it "
                                f"{_os_problem(exc)}") from None
            stat = os.statvfs(folder)
            if stat.f_bavail * stat.f_frsize < MIN_FREE:
                raise UserError(f"the results store {self.path} is on a file system with "
                                f"only {stat.f_bavail * stat.f_frsize >> 10} KiB free: a run "
                                "stores every measurement there; free some space first")

        class Probed(Exception):
            """Ends the probe's transaction, so that it is rolled back."""

        def probe(conn: sa.Connection) -> None:
            # What a run writes, in every table, then rolled back.
            run_id, now = f"probe-{uuid.uuid4().hex[:16]}", time.time()
            conn.execute(runs.insert().values(id=run_id, name="probe", kind="probe",
                                              status=RunStatus.RUNNING, created_at=now,
                                              spec_source=""))
            conn.execute(points.insert().values(run_id=run_id, idx=0, requested="{}",
                                                config="{}"))
            key = conn.execute(trials.insert().values(
                run_id=run_id, point_idx=0, repetition=0, position=0,
                status=TrialState.RUNNING,
                started_at=now, finished_at=now)).inserted_primary_key
            trial_id = key[0] if key else None
            conn.execute(seconds.insert().values(trial_id=trial_id, t=0.0))
            conn.execute(os_seconds.insert().values(trial_id=trial_id, t=0.0))
            conn.execute(saved_settings.insert().values(run_id=run_id, name="probe",
                                                        server="{}", status="changed",
                                                        saved_at=now))
            conn.execute(run_locks.insert().values(run_id=run_id, token="probe", host="",
                                                   pid=0, acquired_at=now, heartbeat_at=now))
            conn.execute(runs.update().where(runs.c.id == run_id).values(
                status=RunStatus.DONE))
            conn.execute(run_locks.delete().where(run_locks.c.run_id == run_id))
            conn.execute(trials.update().where(trials.c.id == trial_id).values(value=0.0))
            raise Probed

        with contextlib.suppress(Probed):
            self._tx(probe, passing=(Probed,), probing=True)

    # --- every statement ------------------------------------------------------------------------

    def _tx(self, work: Callable[[sa.Connection], T], *, write: bool = True,
            passing: tuple[type[BaseException], ...] = (), probing: bool = False) -> T:
        """`work` in one transaction (committed when `write`), tried again while its failure
        is a passing one; any other failure of the database is one line (UserError).
        Exceptions in `passing` reach the caller as they are."""
        start = time.monotonic()
        pause = 0.1
        while True:
            try:
                with self.engine.begin() if write else self.engine.connect() as conn:
                    result = work(conn)
                if write and not probing:
                    self._written = True
                self._gone = False
                return result
            except passing:
                raise
            # What the database (or the pool reaching it) said; SQLAlchemy's other errors are
            # knoblab's own mistakes, for the crash log.
            except (sa.exc.DBAPIError, sa.exc.TimeoutError, sa.exc.DisconnectionError) as exc:
                if _passing(exc) and not self._gone:
                    if time.monotonic() - start + pause < RETRY_FOR:
                        time.sleep(pause)
                        pause = min(pause * 2, 5.0)
                        continue
                    # The clean-up after this failure (the run's status, its claim) tries
                    # once each, instead of waiting as long again.
                    self._gone = True
                raise self._failure(exc, start, write=write or probing) from None

    def _scrub(self, text: str) -> str:
        """A message from the driver, with no trace of the password."""
        for secret in {self._secret, quote(self._secret, safe="")} - {""}:
            text = text.replace(secret, "***")
        return hide_passwords(text)

    def _failure(self, exc: sa.exc.SQLAlchemyError, start: float, *,
                 write: bool = False) -> UserError:
        """One line: the store, what is wrong with it in words, and the database's own."""
        orig = getattr(exc, "orig", None) or exc
        said = self._scrub(_first_line(orig))
        sqlite = "_".join(str(getattr(orig, "sqlite_errorname", "")).split("_")[:2])
        state = str(getattr(orig, "sqlstate", None) or "")
        user = self.url.username or "(the default user)"
        waited = time.monotonic() - start
        if sqlite == "SQLITE_CORRUPT":
            problem = (f"it is damaged ({said}): restore it from a backup, or save what can "
                       f"still be read with: sqlite3 {self.path} .recover")
        elif sqlite == "SQLITE_NOTADB":
            problem = (f"it is not a SQLite database, or it is damaged ({said}): give another "
                       "file, or restore it from a backup")
        elif sqlite in ("SQLITE_BUSY", "SQLITE_LOCKED"):
            problem = (f"it is locked by another process, for over {max(waited, LOCK_WAIT):.0f}"
                       f" s now ({said}): find which with: fuser {self.path}; or try again "
                       "when it is done")
        elif sqlite == "SQLITE_READONLY" or state == "25006":
            problem = (f"it is read-only ({said}): check its file's permissions and file "
                       "system" if sqlite else
                       f"it is read-only ({said}): a standby, or read-only by default; point "
                       "knoblab at the primary")
        elif sqlite in ("SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_AUTH"):
            problem = (f"it cannot be opened ({said}): check the permissions of the file and "
                       "its folder")
        elif sqlite == "SQLITE_FULL" or state in ("53100", "53200"):
            problem = f"its disk is full ({said}): free some space"
        elif sqlite == "SQLITE_IOERR":
            problem = f"reading or writing it failed ({said}): check its disk"
        elif state == "42501":
            problem = (f"user {user} may not {'write' if write else 'read'} it ({said}): grant "
                       f"it {'INSERT, UPDATE and DELETE' if write else 'SELECT'} on knoblab's "
                       "tables, or use another user")
        elif state.startswith("28") or _refused_login(said):
            problem = (f"the login was refused ({said}): check the user and its password "
                       "(PGPASSWORD or ~/.pgpass)")
        elif state == "3D000" or _no_database(said):
            problem = f"its database does not exist ({said})"
        elif _passing(exc):
            problem = (f"the connection to it was lost, and not made again in {waited:.0f} s "
                       f"({said})" if self._opened and waited >= 1 else
                       f"it cannot be reached ({said})")
        else:
            problem = f"it failed ({said})"
        if self._written:
            problem += "; what was stored before is kept"
        return UserError(f"{'the' if self._opened else 'cannot open the'} results store "
                         f"{self.name}: {problem}")

    # --- write side ---------------------------------------------------------------------------

    def create_run(self, *, name: str, experiment: Experiment, spec_source: str,
                   server_binary: str, server_version: str, info: RunInfo,
                   point_list: list[tuple[dict[str, str], dict[str, str]]]) -> str:
        run_id = uuid.uuid4().hex[:8]
        if self._study is not None:
            info = replace(info, study=self._study)

        def work(conn: sa.Connection) -> None:
            conn.execute(runs.insert().values(
                id=run_id, name=name, kind=experiment, status=RunStatus.RUNNING,
                created_at=time.time(), host=socket.gethostname(), spec_source=spec_source,
                server_binary=server_binary, server_version=server_version,
                info=json.dumps(info.to_json()),
            ))
            if point_list:  # a capture has none
                conn.execute(points.insert(), [
                    {"run_id": run_id, "idx": i, "requested": json.dumps(req),
                     "config": json.dumps(cfg)}
                    for i, (req, cfg) in enumerate(point_list)
                ])
        self._tx(work)
        return run_id

    @contextlib.contextmanager
    def measuring_for(self, study: str) -> Iterator[None]:
        """Every run created meanwhile is one of the study's: `knoblab runs` shows the study,
        and its runs only when asked (--study)."""
        before, self._study = self._study, study
        try:
            yield
        finally:
            self._study = before

    def save_study(self, name: str, *, status: RunStatus, spec_source: str,
                   info: dict[str, Any], result: dict[str, Any] | None = None,
                   error: str | None = None) -> None:
        """The study's row, made or brought up to date; its first start is kept."""
        _create_tables(self.engine, study_metadata)
        key = study_key(name)
        now = time.time()
        values = {"name": name, "status": status, "updated_at": now, "host": socket.gethostname(),
                  "spec_source": spec_source, "info": json.dumps(info),
                  "finished_at": None if status == RunStatus.RUNNING else now, "error": error}
        if result is not None:
            values["result"] = json.dumps(result)

        def work(conn: sa.Connection) -> None:
            found = conn.execute(sa.select(studies.c.id).where(studies.c.id == key)).first()
            if found is None:
                conn.execute(studies.insert().values(id=key, created_at=now, **values))
            else:
                conn.execute(studies.update().where(studies.c.id == key).values(**values))
        try:
            self._tx(work, passing=(sa.exc.IntegrityError,))
        except sa.exc.IntegrityError:  # another worker made it at the same moment
            self._tx(work)

    def studies(self, name: str | None = None) -> list[dict[str, Any]]:
        """The tuning studies, newest first (`name`: only those whose name contains it); none
        in a store no study was written to."""
        def read(conn: sa.Connection) -> list[Any]:
            if not sa.inspect(conn).has_table(studies.name):
                return []
            query = studies.select().order_by(studies.c.created_at.desc())
            if name:
                query = query.where(studies.c.name.contains(name, autoescape=True))
            return list(conn.execute(query).mappings().all())
        return [_listed_study(row) for row in self._tx(read, write=False)]

    def study(self, name: str) -> dict[str, Any] | None:
        """The study of exactly this name, with its result (None: not yet made), or None."""
        key = study_key(name)

        def read(conn: sa.Connection) -> Any:
            if not sa.inspect(conn).has_table(studies.name):
                return None
            return conn.execute(studies.select().where(studies.c.id == key)).mappings().first()
        row = self._tx(read, write=False)
        if row is None:
            return None
        with self._reading(f"study {name!r}"):
            return checked_study(row)

    def begin_trial(self, run_id: str, *, point_idx: int, repetition: int,
                    position: int) -> int:
        """A trial row in status "running": per-second data can refer to it at once."""
        def work(conn: sa.Connection) -> int:
            result = conn.execute(trials.insert().values(
                run_id=run_id, point_idx=point_idx, repetition=repetition, position=position,
                status=TrialState.RUNNING, started_at=time.time(), finished_at=time.time(),
            ))
            key = result.inserted_primary_key
            if key is None:  # only without a compiled single-row insert; this one always is
                raise RuntimeError("the database returned no id for the new trial")
            return int(key[0])
        return self._tx(work)

    def add_second(self, trial_id: int, t: float, **values: float) -> None:
        self._tx(lambda conn: conn.execute(seconds.insert().values(trial_id=trial_id, t=t,
                                                                   **values)))

    def add_os_second(self, trial_id: int, t: float, figures: dict[str, float]) -> None:
        self._tx(lambda conn: conn.execute(os_seconds.insert().values(
            trial_id=trial_id, t=t, **{k: figures.get(k) for k in OS_FIELDS})))

    def finish_trial(self, trial_id: int, *, status: TrialState, value: float | None = None,
                     effective: dict[str, str] | None = None,
                     details: dict[str, Any] | None = None, error: str | None = None) -> None:
        self._tx(lambda conn: conn.execute(trials.update().where(trials.c.id == trial_id).values(
            status=status, finished_at=time.time(), value=value,
            effective=json.dumps(effective or {}), details=json.dumps(details or {}),
            error=storable(error),
        )))

    def discard_unfinished(self, run_id: str) -> int:
        """Trials left "running" by a process that died: not measurements, mark them so."""
        return self._tx(lambda conn: conn.execute(trials.update().where(
            (trials.c.run_id == run_id) & (trials.c.status == TrialState.RUNNING)
        ).values(status=TrialState.DISCARDED, error="knoblab stopped during this trial"))
        ).rowcount

    def set_status(self, run_id: str, status: RunStatus, error: str | None = None) -> None:
        finished = time.time() if status != RunStatus.RUNNING else None
        self._tx(lambda conn: conn.execute(runs.update().where(runs.c.id == run_id).values(
            status=status, finished_at=finished, error=storable(error))))

    def update_info(self, run_id: str, **items: Any) -> None:
        info = self.run(run_id)["info"]
        info.update(items)
        self._tx(lambda conn: conn.execute(runs.update().where(runs.c.id == run_id).values(
            info=json.dumps(info))))

    def save_original(self, run_id: str, server: dict[str, Any], name: str,
                      original: str | None) -> None:
        """Record a setting's original value before knoblab first changes it (once per run)."""
        def work(conn: sa.Connection) -> None:
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
        self._tx(work)

    def lock_run(self, run_id: str, gone: Callable[[dict[str, Any]], bool]) -> str:
        """Take the run for this process; a token to renew and release it with. A holder
        for which `gone(holder)` is true (a dead process, a silent machine) is replaced;
        any other makes this a UserError."""
        token = uuid.uuid4().hex

        def take(conn: sa.Connection) -> None:
            now = time.time()
            conn.execute(run_locks.insert().values(
                run_id=run_id, token=token, host=socket.gethostname(),
                pid=os.getpid(), acquired_at=now, heartbeat_at=now))

        def replace(conn: sa.Connection) -> bool:
            """Whether the claim is ours now (taken by a try whose answer was lost)."""
            holder = conn.execute(run_locks.select().where(
                run_locks.c.run_id == run_id)).mappings().first()
            if holder is None:
                return False  # released meanwhile
            if holder["token"] == token:
                return True
            if not gone(dict(holder)):
                raise RunBusy(f"run {run_id} is still being measured by process "
                              f"{holder['pid']} on {holder['host']}; wait for it, or "
                              "stop it (Ctrl-C) and resume then")
            # Only that holder's row: if another process replaced it first, it wins.
            conn.execute(run_locks.delete().where(
                (run_locks.c.run_id == run_id) & (run_locks.c.token == holder["token"])))
            return False

        for _ in range(3):
            try:
                self._tx(take, passing=(sa.exc.IntegrityError,))
                return token
            except sa.exc.IntegrityError:
                pass
            if self._tx(replace):
                return token
        raise UserError(f"run {run_id} is being taken over by another process; try again")

    def holders_on(self, host: str) -> list[int]:
        """Processes on `host` measuring a run of this store now (or left a claim behind)."""
        return self._tx(lambda conn: [int(pid) for pid in conn.execute(
            sa.select(run_locks.c.pid).where(run_locks.c.host == host)).scalars()],
            write=False)

    def renew_lock(self, run_id: str, token: str) -> None:
        self._tx(lambda conn: conn.execute(run_locks.update().where(
            (run_locks.c.run_id == run_id) & (run_locks.c.token == token)
        ).values(heartbeat_at=time.time())))

    def unlock_run(self, run_id: str, token: str) -> None:
        self._tx(lambda conn: conn.execute(run_locks.delete().where(
            (run_locks.c.run_id == run_id) & (run_locks.c.token == token))))

    def mark_restored(self, run_id: str, names: list[str], status: str = "restored") -> None:
        """Settings no longer pending: put back ("restored"), never really changed ("unchanged":
        the server refused the change), or given up by the user ("forgotten")."""
        self._tx(lambda conn: conn.execute(saved_settings.update().where(
            (saved_settings.c.run_id == run_id) & saved_settings.c.name.in_(names)
        ).values(status=status, restored_at=time.time())))

    def pending_restores(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Settings still changed: by a run that was killed, or whose restore failed."""
        query = saved_settings.select().where(saved_settings.c.status == "changed")
        if run_id is not None:
            query = query.where(saved_settings.c.run_id == run_id)
        rows = self._tx(lambda conn: conn.execute(query.order_by(saved_settings.c.saved_at))
                        .mappings().all(), write=False)
        return [{**dict(r), "server": self._json(r["server"], f"run {r['run_id']}'s server")}
                for r in rows]

    # --- read side ----------------------------------------------------------------------------

    def run(self, run_id: str) -> dict[str, Any]:
        """A run by its id, a unique beginning of it, or "latest" (the newest run of its own,
        never a tuning study's trial, validation or reduction)."""
        if run_id == "latest":
            newest = self.newest_run()
            if newest is None:
                raise UserError("the store holds no run of its own yet" + (
                    " (only tuning studies': see knoblab runs)" if self.list_runs(limit=1)
                    else "") + "; start one with: knoblab run SPEC")
            run_id = newest["id"]

        def find(conn: sa.Connection) -> tuple[Any, list[str]]:
            row = conn.execute(runs.select().where(runs.c.id == run_id)).mappings().first()
            if row is not None:
                return row, []
            return None, list(conn.execute(sa.select(runs.c.id).where(
                runs.c.id.startswith(run_id, autoescape=True))).scalars().all())

        row, matches = self._tx(find, write=False)
        if row is None:
            if len(matches) == 1:
                return self.run(matches[0])
            if matches:
                shown = ", ".join(sorted(matches)[:5]) + (", …" if len(matches) > 5 else "")
                raise UserError(f"run {run_id!r} is ambiguous: it begins {len(matches)} "
                                f"runs ({shown}); give more of the id")
            raise UserError(f"no run {run_id!r} in the store; list runs with: knoblab runs")
        with self._reading(f"run {row['id']}"):
            return checked_run(row)

    def points(self, run_id: str) -> list[tuple[dict[str, str], dict[str, str]]]:
        rows = self._tx(lambda conn: conn.execute(points.select().where(
            points.c.run_id == run_id).order_by(points.c.idx)).mappings().all(), write=False)
        found = []
        with self._reading(f"run {run_id}"):
            for i, r in enumerate(rows):
                if r["idx"] != i:
                    raise Damaged(f"its points are numbered {_kind_of(r['idx'])} where "
                                  f"{i} belongs")
                requested = _object(r["requested"], f"point {i}'s settings", empty="")
                config = _object(r["config"], f"point {i}'s configuration", empty="")
                _names_to_text(requested, f"point {i}'s settings")
                _names_to_text(config, f"point {i}'s configuration")
                found.append((requested, config))
        return found

    def trials(self, run_id: str) -> list[Trial]:
        rows = self._tx(lambda conn: conn.execute(trials.select().where(
            trials.c.run_id == run_id).order_by(trials.c.position, trials.c.id))
            .mappings().all(), write=False)
        with self._reading(f"run {run_id}"):
            return [self._trial(r) for r in rows]

    def _trial(self, r: Any) -> Trial:
        """A `trials` row as a record, or Damaged naming what is wrong in it: a measured value
        is a finite number, never negative (a time or a throughput)."""
        what = f"trial {r['id']}"
        for column in ("point_idx", "repetition", "position"):
            if _number(r[column], f"{what}'s {column.replace('_', ' ')}", whole=True) < 0:
                raise Damaged(f"its {what}'s {column.replace('_', ' ')} is negative")
        try:
            status = TrialState(r["status"])
        except ValueError:
            raise Damaged(f"its {what} is in a state knoblab does not know "
                          f"({_kind_of(r['status'])}): a newer knoblab wrote it, or the store "
                          "is damaged") from None
        value = _number(r["value"], f"{what}'s measured value", optional=True)
        if value is not None and value < 0:
            raise Damaged(f"its {what}'s measured value is negative ({value})")
        started = _number(r["started_at"], f"{what}'s start time")
        finished = _number(r["finished_at"], f"{what}'s end time")
        effective = _object(r["effective"], f"{what}'s settings read back")
        _names_to_text(effective, f"{what}'s settings read back", optional=True)
        details = _object(r["details"], f"{what}'s details")
        check_details(details, what)
        return Trial(r["id"], r["point_idx"], r["repetition"], r["position"], status, value,
                     effective, details,
                     _text(r["error"], f"{what}'s error", optional=True),
                     max(0.0, finished - started), started)

    @contextlib.contextmanager
    def _reading(self, what: str) -> Iterator[None]:
        """Rows becoming records: a damaged one is one line naming the store, what it belongs
        to and what is wrong in it."""
        try:
            yield
        except Damaged as exc:
            raise UserError(f"the results store {self.name} is damaged: in {what}, {exc}; "
                            "restore the store from a backup (or delete "
                            f"{'that study' if what.startswith('study') else 'that run'})"
                            ) from None

    def _json(self, text: str, what: str) -> Any:
        """A stored JSON text; one that is not (a damaged or hand-edited store) is a line."""
        try:
            return json.loads(text)
        except (ValueError, TypeError):
            raise UserError(f"the results store {self.name} is damaged: in {what}, a value "
                            "is not the JSON knoblab wrote; restore the store from a backup"
                            ) from None

    def _state(self, text: str, what: str) -> TrialState:
        try:
            return TrialState(text)
        except ValueError:
            raise UserError(f"the results store {self.name}: in {what}, a state knoblab does "
                            f"not know ({text!r}): a newer knoblab wrote it, or the store is "
                            "damaged") from None

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
        with self._reading(f"run {run_id}"):
            for row in self._tx(lambda conn: conn.execute(query).mappings().all(), write=False):
                what = f"trial {row['trial_id']}'s {table.name.replace('_', ' ')}"
                _number(row["t"], f"{what} time")
                for k in fields:
                    _number(row[k], f"{what} {k}", optional=True)
                by_trial.setdefault(row["trial_id"], []).append(
                    {k: row[k] for k in ("t", *fields)})
        return by_trial

    def list_runs(self, limit: int | None = 20, name: str | None = None,
                  offset: int = 0) -> list[dict[str, Any]]:
        """The newest runs first; `name`: only runs whose name contains it; `offset`: after
        skipping that many. A limit beyond what the database can count (or None) is all of
        them."""
        query = runs.select().order_by(runs.c.created_at.desc(), runs.c.id)
        if name:
            query = query.where(runs.c.name.contains(name, autoescape=True))
        if limit is not None and limit < MAX_ROWS:
            query = query.limit(max(limit, 0))
        if offset > 0:
            query = query.offset(offset)
        rows = self._tx(lambda conn: conn.execute(query).mappings().all(), write=False)
        return [_listed(r) for r in rows]

    def each_run(self, name: str | None = None, page: int = 500) -> Iterator[dict[str, Any]]:
        """The runs as `list_runs` gives them, newest first, read a page at a time: a reader
        that stops after a few does not read a store of thousands (most of them studies')."""
        offset = 0
        while True:
            found = self.list_runs(limit=page, name=name, offset=offset)
            yield from found
            if len(found) < page:
                return
            offset += page

    def newest_run(self) -> dict[str, Any] | None:
        """The newest run of its own (as `list_runs` gives it), not a tuning study's, nor a
        capture's or a verify's (whose answers are not points)."""
        return next((run for run in self.each_run()
                     if study_of(json.loads(run["info"])) is None
                     and Experiment(run["kind"]).has_points), None)


def _listed(row: Any) -> dict[str, Any]:
    """A run as a listing shows it: `info` as stored (JSON text); a damaged run stands there
    as damaged, saying what is wrong, so that the others are still listed."""
    try:
        run = checked_run(row)
    except Damaged as exc:
        run = dict(row)
        keep = {c: run[c] if isinstance(run[c], str) else f"({_kind_of(run[c])})"
                for c in ("id", "name", "kind")}
        return {**run, **keep, "status": f"damaged: {exc}", "info": "{}",
                "created_at": _time_or_zero(run["created_at"]),
                "finished_at": None, "host": None, "server_version": None,
                "server_binary": None, "error": str(exc)}
    return {**run, "info": json.dumps(run["info"])}


def study_of(info: dict[str, Any]) -> str | None:
    """The tuning study a run was measured for (one of its trials, validations, reductions),
    from the run's description; None for a run of its own. The one place that says which
    runs are a study's: `knoblab runs` lists them only with --study, and `latest` is never
    one of them."""
    study = info.get("study")
    return study if isinstance(study, str) else None


def _listed_study(row: Any) -> dict[str, Any]:
    """A study as a listing shows it; a damaged one stands there as damaged, saying what is
    wrong, so that the others are still listed (`study` names it in one line)."""
    try:
        return checked_study(row)
    except Damaged as exc:
        study = dict(row)
        return {**study, "name": study["name"] if isinstance(study["name"], str) else
                f"({_kind_of(study['name'])})", "status": f"damaged: {exc}", "info": {},
                "result": None, "host": None, "finished_at": None, "error": str(exc),
                "spec_source": "", "created_at": _time_or_zero(study["created_at"]),
                "updated_at": _time_or_zero(study["updated_at"])}


def _time_or_zero(when: Any) -> float:
    """A stored time, or 0 (the epoch) for one that is not a finite number."""
    return float(when) if isinstance(when, int | float) and not isinstance(when, bool) and \
        math.isfinite(when) else 0.0


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


def _passing(exc: sa.exc.SQLAlchemyError) -> bool:
    """Whether a failure may pass: another process's lock, a connection lost or refused (a
    server restarting, a fail-over), a conflict between transactions."""
    if isinstance(exc, sa.exc.TimeoutError):  # no connection free in the pool
        return True
    if not isinstance(exc, sa.exc.DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    orig = exc.orig
    if str(getattr(orig, "sqlite_errorname", "")).startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return True
    state = getattr(orig, "sqlstate", None)
    if state is not None:
        return state in ("40001", "40P01", "57P01", "57P02", "57P03") or state.startswith("08")
    # Without a state the failure is the client's: the connection, not a statement; but a
    # server that answered "no such database" or "wrong password" will answer so again.
    said = _first_line(orig) if orig is not None else ""
    return isinstance(exc, sa.exc.OperationalError) and \
        not hasattr(orig, "sqlite_errorname") and not _refused_login(said) and \
        not _no_database(said)


def _refused_login(said: str) -> bool:
    return "authentication failed" in said or "no pg_hba.conf entry" in said or \
        re.search(r'role "[^"]*" does not exist', said) is not None


def _no_database(said: str) -> bool:
    return re.search(r'database "[^"]*" does not exist', said) is not None
