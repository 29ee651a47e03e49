"""`knoblab capture`: a running server's statements (its general or slow query log, for a
window) and its databases (a dump), written to a folder with a spec `knoblab tune` takes as it
is.

Which log (`--log`, `knoblab.server.query_log.Source`): the slow log times each statement but
follows only the connections opened during the window; the general log follows every one, an
application's pooled connections opened hours before included. `auto` takes the slow log when
no other connection is open as the window begins, else the general log. A window whose log
missed connections that ran statements in it (the slow log asked for, with a pool open) is
never "ready": it says so, and how to capture them.

Everything is checked before the server is touched: the spec names a running server, the
folder is new, empty or a capture's, the user holds every privilege needed (the missing
ones named in one line; seeing the databases the open connections use among them), the dump
fits on the disk. Then the settings of the slow log are
journalled and changed (`knoblab.server.query_log`), the window runs, the settings are put
back — at its end, on a signal, on an error; after a kill -9 `knoblab restore` does it —
and only then is the data dumped (`knoblab.server.dumping`), so the dump's own reads are not
captured. The folder is 0700 and its files 0600: the log's literals are the user's data.

What is written is what `knoblab tune` takes: the statements as a replay reads them (none it
could replay, or some in databases this user cannot see and so dump, is not ready), and the
server's own configuration as the spec's baseline, each setting asked of the very checks a
run of the spec makes (`baseline`): one they refuse is left out with their words, giving up
durability is kept with the consent written (production runs so), memory over this
machine's budget is said in place of "ready".

One capture at a time per server: the capture holds the server's capture lock
(`knoblab.server.query_log.hold_lock`) from before it reads anything until it ends, whatever
KNOBLAB_HOME it runs from, and finds what a capture killed in its window left on the server
(`killed_capture`). `knoblab restore` leaves a capture still under way alone (`under_way`) and
removes what a killed one left once its settings are back (`after_restore`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import socket
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import psutil
import pymysql
from rich.filesize import decimal as format_size

from knoblab import __version__, machine, places, runner, safety
from knoblab import server as targets
from knoblab.capture import read_log
from knoblab.capture.fingerprint import without_values
from knoblab.capture.plan import Plan, plan_for
from knoblab.capture.reconnect import IDLE_FOR_MS, TRY_WITHIN, Reconnected, reconnect_idle
from knoblab.catalog import Catalog
from knoblab.codec import JSON, Record
from knoblab.connection import Endpoint, one
from knoblab.errors import UserError, shielded
from knoblab.server.dumping import (
    TO_DUMP,
    DumpPlan,
    disk_check,
    dump_program,
    missing_on,
    missing_privileges,
    partial_name,
    plan_dump,
    run_dump,
    unseen_databases,
)
from knoblab.server.external import ExternalServer, PutBack, PutBackFailed, refusal
from knoblab.server.query_log import (
    GENERAL,
    SLOW,
    SOURCES,
    QueryLog,
    Source,
    hold_lock,
    killed_capture,
    lock_connection,
    open_connections,
    put_aside_back,
)
from knoblab.store import RunInfo, Store
from knoblab.units import format_duration
from knoblab.vocabulary import Experiment, RunStatus
from knoblab.workloads import Workload
from knoblab.workloads.replay import SESSIONS_AT_MOST, ReplayWorkload

MARK = ".knoblab-capture"  # a folder holding it was written by knoblab capture
LOG, DUMP, SPEC, SUMMARY = "statements.log", "data.sql.zst", "spec.toml", "capture.json"


@dataclass(frozen=True)
class CaptureJSON(Record):
    """capture.json: what a capture took and from where, what it changed on the server for the
    window and how each setting was put back, and production's configuration and machine."""

    window: JSON  # when it began and ended, the seconds asked, whether Ctrl-C ended it early
    log: JSON  # the log that held the statements, how many, from how many connections, missed
    settings: JSON  # each setting changed for the window, and how it was put back
    server: JSON  # how the server was reached (never a password)
    version: str  # the server's version, as its settings were read against
    version_line: str | None  # VERSION(), as the server says it
    run: str  # the capture's run in the store
    configuration: JSON  # production's settings: the spec's baseline, and those left out, why
    machine: JSON | None  # production's memory, CPUs, disk, when it runs on this machine
    dump: JSON  # the data: how it was dumped (schema, all, sample=N), its file and size
    knoblab_version: str  # the knoblab that captured it

    def text(self) -> str:
        """capture.json's text: every key a field above, in order (a key the capture adds
        without its field fails here), as the manual's reference lists them."""
        return json.dumps(self.to_json(), indent=2) + "\n"
# A capture is not ready when more than this share of its statements have no values (a
# replay leaves them out, changing the mix); fewer are left out, said.
MOST_WITHOUT_VALUES = 0.05
_OURS = frozenset({MARK, LOG, DUMP, SPEC, SUMMARY, partial_name(DUMP)})


class CaptureView(Protocol):
    """What the capture shows while it runs (the command line's console)."""

    def message(self, text: str) -> None: ...

    def window(self, seconds: float) -> Callable[[float, int], None]:
        """Starts the window's bar; the callable takes (elapsed, statements so far)."""

    def dumping(self, total: int) -> Callable[[int], None]:
        """Starts the dump's bar in bytes of text; the callable takes the bytes so far."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class Request:
    spec: Path
    out: Path
    seconds: float
    data: tuple[str, int | None]  # knoblab.server.dumping.parse_data
    log: str = "auto"  # which of the server's logs: "auto", or a key of query_log.SOURCES
    # End the connections open before the window, each when idle, so that their pool opens
    # new ones inside it (knoblab.capture.reconnect).
    reconnect: bool = False


def read_endpoint(path: Path, command: str = "capture") -> tuple[str, Endpoint, str]:
    """The spec's name, the running server its [server] names, and its text; a server
    knoblab starts (a sandbox, or a spec without [server]) is one line, naming `command`."""
    try:
        source = path.read_text(encoding="utf-8")
        data = tomllib.loads(source)
    except OSError as exc:
        raise UserError(f"cannot read spec {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a UTF-8 text file; save the spec as UTF-8 TOML") from None
    except ValueError as exc:
        raise UserError(f"{path}: invalid TOML: {exc}") from None
    server = data.get("server")
    if not isinstance(server, dict):
        server = {}
    kind = targets.kind_named(server)  # an unknown one is said by of_section
    if kind is not None and not kind.running:
        raise UserError(f"{path}: knoblab {command} needs a running server: give [server] "
                        "kind = \"external\" with host and port or socket (a sandbox has no "
                        f"load of its own to {command})")
    endpoint = targets.of_section(server).endpoint
    assert endpoint is not None
    name = data.get("name") if isinstance(data.get("name"), str) else path.stem
    return str(name), endpoint, source


def check_out(out: Path) -> None:
    """A folder capture may write: new, empty, or a previous capture's (nothing else in it)."""
    places.output_folder(out, "--out")
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir() if p.name not in _OURS)
        if foreign or (any(out.iterdir()) and not (out / MARK).exists()):
            shown = ", ".join((foreign or sorted(p.name for p in out.iterdir()))[:3])
            raise UserError(f"--out {out} holds files knoblab capture did not write ({shown}); "
                            "give a new or empty folder")


def _claim(out: Path) -> None:
    try:
        out.mkdir(mode=0o700, parents=True, exist_ok=True)
        out.chmod(0o700)  # the statements' literals are the user's data
        _write(out / MARK, "Written by knoblab capture: it may overwrite this folder.\n")
        for stale in (LOG, DUMP, SPEC, SUMMARY, partial_name(DUMP)):  # a previous capture's
            with contextlib.suppress(FileNotFoundError):
                (out / stale).unlink()
    except OSError as exc:
        raise UserError(f"cannot write in --out {exc.filename or out}: {exc.strerror}") from None


def _write(path: Path, text: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:  # a full disk
        with contextlib.suppress(OSError):
            path.unlink()
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None


def capture(request: Request, store: Store, view: CaptureView,
            rearm: Callable[[], None]) -> int:
    """The whole capture; 0 when the folder holds its spec, 130 when a second signal stopped
    the dump (the settings are back, the statements kept). `rearm` lets the next signal stop
    the command again after the first ended the window."""
    name, endpoint, source = read_endpoint(request.spec)
    check_out(request.out)
    server = ExternalServer(endpoint)
    version_line, _, _ = server.probe()
    lock = hold_lock(server)  # before anything is read: what it reads is not changing
    try:
        with lock.cursor() as cur:
            cur.execute("SELECT CONNECTION_ID()")
            lock_id = int(one(cur)[0])
        return _capture(request, store, view, rearm, (name, source, version_line), server,
                        lock_id)
    finally:
        with contextlib.suppress(Exception):  # the server frees the lock with its connection
            lock.close()


def _capture(request: Request, store: Store, view: CaptureView, rearm: Callable[[], None],
             spec: tuple[str, str, str], server: ExternalServer, lock_id: int) -> int:
    """The capture, with the server's capture lock held; `spec`: its name, its text and the
    server's version line."""
    name, spec_text, version_line = spec
    endpoint = server.endpoint
    catalog = server.catalog()
    where = endpoint.describe()
    checked = _checked(request, server, catalog, store, lock_id, where)
    taken_from, why, sees_all, log, plan, configured, left_out = checked
    room = disk_check(plan, request.out) if plan.databases else ""
    if plan.databases:
        dump_program()
    view.message(f"capturing {where} ({catalog.server_version}) for "
                 f"{format_duration(request.seconds)} into {request.out}")
    changed = ", ".join(f"{n} = {v!r}" for n, v in log.changes.items() if not n.endswith("_file"))
    view.message(_configuration_said(configured, left_out))
    if taken_from is SLOW and not sees_all:
        view.message(f"{endpoint.user} cannot see other users' connections (it lacks the "
                     "PROCESS privilege): any open before the window are missed by the slow "
                     "log, unseen; --log general takes every connection's statements")
    view.message(f"the statements are taken from the {taken_from.said} ({why}); it goes to "
                 f"{log.describe()}; changed for the window and put back after it: {changed}")
    for said in _dump_said(plan, room):
        view.message(said)
    _claim(request.out)
    run_id = store.create_run(
        name=f"{name}-capture", experiment=Experiment.CAPTURE, spec_source=spec_text,
        server_binary=where, server_version=catalog.server_version,
        # It runs no workload (stores of older versions say {"kind": "capture"}: never read)
        info=RunInfo(workload={}, dataset={"folder": str(request.out.resolve())},
                     owner={"pid": os.getpid(), "host": socket.gethostname(),
                            "lock": lock_id},
                     spec_dir=str(request.spec.parent.resolve()), knoblab_version=__version__),
        point_list=[])
    log.bind(run_id)
    try:
        for removed in log.left_by_killed():
            view.message(removed)
        summary = _window(request, server, log, view, rearm)
        replayed = _captured(request, summary, log, taken_from, plan, server.endpoint, view)
        judged = baseline(catalog, configured, ReplayWorkload(
            log=request.out / LOG, plan=replayed,
            sessions=min(replayed.peak, SESSIONS_AT_MOST)))
        for said in judged.said():
            view.message(said)
        summary["log"].update(peak_sessions=replayed.peak,
                              other_knoblab_connections=len(log.others))
        summary.update(server={k: v for k, v in server.stored().items()
                               if k not in ("restart_command", "config_include")},
                       version=catalog.server_version, version_line=version_line,
                       run=run_id, configuration=judged.described(left_out),
                       machine=_machine(server))
        try:
            code = _dump(request, endpoint, plan, summary, view)
            summary["knoblab_version"] = __version__
            _write(request.out / SUMMARY, CaptureJSON(**summary).text())
            if code == 0:
                _write(request.out / SPEC, _spec_text(name, summary, bool(plan.databases)))
        except UserError as exc:
            raise UserError(f"{exc}; the statements captured are in {request.out / LOG} and "
                            f"{_back(summary)}; capture again with --out on a disk with "
                            "room, or with less --data") from None
    except BaseException as exc:
        with contextlib.suppress(Exception):  # the store may be what failed
            store.set_status(run_id, RunStatus.INTERRUPTED if isinstance(exc, KeyboardInterrupt)
                             else RunStatus.FAILED, str(exc)[:500] or type(exc).__name__)
        raise
    store.set_status(run_id, RunStatus.DONE if code == 0 else RunStatus.INTERRUPTED)
    if code == 0:
        data = f"data in {request.out / DUMP}" if plan.databases else "no data"
        files = (f"statements in {request.out / LOG}, {data}, what was done in "
                 f"{request.out / SUMMARY}")
        if judged.not_here is None:
            view.message(f"ready: knoblab tune {request.out / SPEC} ({files})")
        else:  # production's configuration whole, for a machine that can take it
            view.message(f"captured ({files}), not ready on this machine: knoblab tune would "
                         f"refuse {request.out / SPEC} here: {judged.not_here}")
    return code


def _captured(request: Request, summary: dict[str, Any], log: QueryLog, taken_from: Source,
              plan: DumpPlan, endpoint: Endpoint, view: CaptureView) -> Plan:
    """The window's statements as a replay plans them, once they are shown fit to replay:
    every connection open before the window followed, values the statements need, at least
    one statement, and no database the dump cannot see; else refused, saying where the
    settings are and where what was captured is."""
    if summary["log"]["missed"]:
        raise UserError(
            f"not ready: the slow log missed {summary['log']['missed']} connection(s) "
            "open before the window that ran statements in it (an application's pool "
            "keeps its connections for hours): the capture would replay a part of the "
            f"load; {_back(summary)}; capture again with --log general (or auto, "
            f"the default); what it did capture is in {request.out / LOG}")
    _check_values(summary["log"], request.out / LOG, _back(summary))
    if not summary["log"]["statements"]:
        unseen = taken_from is SLOW and summary["log"]["open_before"]
        followed = "" if not unseen else (
            " on a connection the slow log followed (one opened before the window logs "
            "only its statements slower than its long_query_time)")
        raise UserError(
            f"nothing was captured: no statement ran on {endpoint.describe()} during the window"
            f"{followed}; {_back(summary)}; capture again while the application "
            "runs, or for longer" + (", with --log general" if unseen else ""))
    if log.others:
        view.message(f"left out {len(log.others)} connection(s) another knoblab opened "
                     "during the window: its statements are not the application's load")
    replayed = _replayed(request.out / LOG, _back(summary))
    hidden = unseen_databases(plan, replayed.databases)
    if hidden:
        raise UserError(
            f"not ready: the statements captured ran in {', '.join(hidden)}, which "
            f"{endpoint.user} cannot see (it lacks SHOW DATABASES and every privilege on "
            "them): the dump would not hold them, and a replay's statements there would "
            f"fail; {_back(summary)}; grant {endpoint.user} {TO_DUMP} on them, or capture "
            f"as a user who holds them; what it did capture is in {request.out / LOG}")
    return replayed


def _checked(request: Request, server: ExternalServer, catalog: Catalog, store: Store,
             lock_id: int, where: str) -> tuple[Source, str, bool, QueryLog, DumpPlan,
                                                dict[str, str], dict[str, str]]:
    """Before anything changes: the log the statements are taken from (and why), whether
    this user sees every connection, the log's plan, the dump's, and production's own
    configuration (with what a sandbox cannot take); refused, naming every privilege
    missing, when the user cannot capture; or while an earlier run's settings are still
    changed on this server."""
    for row in store.pending_restores():
        if server.is_same_as(row["server"]):
            raise UserError(f"run {row['run_id']} left {row['name']} changed on {where}; put "
                            f"it back first with: knoblab restore {row['run_id']}")
    killed = killed_capture(server, catalog)
    if killed is not None and not _restored_here(store, killed):
        raise UserError(f"a knoblab capture (run {killed}) was killed on {where} before its "
                        "end and left the slow log's settings changed: put them back with: "
                        f"knoblab restore {killed} (with the store it ran with), then capture "
                        "again")
    mode, rows = request.data
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            others = {thread: found for thread, found in open_connections(cur).items()
                      if thread != lock_id}
            open_now = list(others)
            # Without PROCESS the process list shows this user's own connections only.
            sees_all = not missing_on(cur, "mysql", ("PROCESS",), "")
            taken_from, why = _source(request.log, len(open_now), sees_all)
            log = QueryLog.plan(server, catalog, store, run_id="", source=taken_from)
            log.own_threads.add(lock_id)  # idle all along, and knoblab's own
            missing = []
            if not log.may_change(cur):
                missing.append(f"SUPER or SYSTEM_VARIABLES_ADMIN (to change the "
                               f"{taken_from.said}'s settings with SET GLOBAL)")
            if log.mode == "table":
                try:
                    cur.execute(f"SELECT 1 FROM mysql.{taken_from.table} LIMIT 0")
                except Exception:
                    missing.append(f"SELECT on mysql.{taken_from.table} (to read the log)")
            if log.aside:
                missing += missing_on(
                    cur, "mysql", ("SELECT", "CREATE", "DROP", "ALTER", "INSERT"),
                    f"to set the server's mysql.{taken_from.table} aside for the window and put "
                    "it back after it")
            plan = plan_dump(cur, mode, rows)
            configured, left_out = production_configuration(cur)
            missing += missing_privileges(cur, plan.databases)
            if request.reconnect and all(missing_on(cur, "mysql", (held,), "")
                                         for held in ("CONNECTION ADMIN", "SUPER")):
                missing.append("CONNECTION ADMIN or SUPER (to end other users' connections: "
                               "--reconnect idle)")
            missing += _unseen_before(plan, [database for database, _ in others.values()])
    finally:
        conn.close()
    if missing:
        raise UserError(f"{where} lacks privileges knoblab capture needs: {'; '.join(missing)}"
                        "; grant them, or capture as a user who holds them")
    return taken_from, why, sees_all, log, plan, configured, left_out


def _configuration_said(configured: dict[str, str], left_out: dict[str, str]) -> str:
    """Production's own configuration, the spec's baseline, in one line."""
    if not configured and not left_out:
        return ("the server's own configuration: every setting at the build's default (or the "
                "server does not say where its settings came from)")
    return (f"the server's own configuration, the baseline of every trial of the spec "
            f"([server.config]): {len(configured)} setting(s) not at the build's default"
            + (f"; left out, as a sandbox cannot take them: {', '.join(sorted(left_out))}"
               if left_out else ""))


def _dump_said(plan: DumpPlan, room: str) -> list[str]:
    """What the dump after the window takes, and the room it has; or that there is none."""
    if not plan.databases:
        return ["no database to dump (none but the server's own and knoblab's): the spec "
                "replays on empty sandboxes"]
    said = [f"then the dump: {plan.describe()}"]
    if plan.not_transactional:
        shown = ", ".join(plan.not_transactional[:8]) + (
            f" and {len(plan.not_transactional) - 8} more"
            if len(plan.not_transactional) > 8 else "")
        said.append(f"not transactional, so dumped without a consistent snapshot (nothing is "
                    f"locked; their rows may be from different moments): {shown}")
    return [*said, room]


def _window(request: Request, server: ExternalServer, log: QueryLog, view: CaptureView,
            rearm: Callable[[], None]) -> dict[str, Any]:
    """The window: settings journalled and changed, (asked) the connections open before it
    reconnected, the log filled, the settings put back, the log written to the folder and
    verified by reading it back."""
    ended_early = False
    active: int | None = None  # connections open before the window that ran statements in it
    began = ended = dt.datetime.now(dt.UTC)
    dest = request.out / LOG
    written = cleaned = False
    left: str | None = None
    put_back = PutBack([])
    # Settings of the window another session set during it: name -> (value, seconds in)
    others: dict[str, tuple[str, float]] = {}
    reconnected: Reconnected | None = None
    try:
        try:
            conn = server.connect()
            try:
                log.start(conn)
                if request.reconnect:
                    reconnected = _reconnect(conn, log, view, request.seconds)
                began = dt.datetime.now(dt.UTC)
                ended_early, active = _filled(conn, log, view, request, server, others)
            finally:
                ended = dt.datetime.now(dt.UTC)
                with contextlib.suppress(Exception):
                    conn.close()
        finally:
            with shielded():
                view.close()
                try:
                    put_back = log.put_back()
                except PutBackFailed as exc:
                    # Still logging: what it wrote stays on the server (knoblab restore
                    # removes it once the settings are back), a copy of it here.
                    cleaned = True
                    with contextlib.suppress(UserError):
                        log.write_out(dest)
                    raise UserError(f"{exc}; the capture is not ready, the statements "
                                    f"captured so far are in {dest}") from None
        if ended_early:
            view.message(f"the window was ended early, after "
                         f"{format_duration((ended - began).total_seconds())}; "
                         f"{put_back.said() or 'nothing was changed'}; keeping what was "
                         "captured and going on to the dump (Ctrl-C again stops it)")
        elif put_back.left:
            view.message(f"note: {put_back.said()}")
        with shielded():
            log.write_out(dest)
        written = True
    except UserError as exc:  # what the window logged stays on the server, said where
        if cleaned:
            raise
        with shielded():
            cleaned, left = True, log.clean_up(keep=True)
        back = put_back.said() or "nothing was changed on the server"
        raise UserError(f"{exc}; {back}" + (f"; {left}" if left else "")) from None
    finally:
        if not cleaned:
            with shielded():
                left = log.clean_up(keep=not written)
    if left:
        view.message(f"note: {left}")
    rearm()
    statements, connections, valueless, prepared_before = _counted(dest, view)
    return {"window": {"start": began.isoformat(), "end": ended.isoformat(),
                       "asked_seconds": request.seconds, "ended_early": ended_early},
            "log": {"file": LOG, "source": log.source.key, "via": log.mode,
                    "statements": statements, "connections": len(connections),
                    "open_before": len(log.open_before), "open_before_active": active,
                    "reconnected": None if reconnected is None else reconnected.describe(),
                    # executions of statements prepared before the window: no values
                    "without_values": valueless,
                    "without_values_connections": len(prepared_before),
                    # what the log could not see: those the slow log did not follow
                    "missed": (len(log.open_before) if active is None else active)
                    if log.source is SLOW else 0},
            "settings": _settings_summary(log, put_back, others)}


def _filled(conn: pymysql.Connection, log: QueryLog, view: CaptureView, request: Request,
            server: ExternalServer, others: dict[str, tuple[str, float]]
            ) -> tuple[bool, int | None]:
    """The window itself, the log filling (its bar with ETA; a setting of the window another
    session changes, said and kept in `others`): whether Ctrl-C ended it early, and how many
    connections open before it ran statements in it (None: not known)."""
    ended_early, active = False, None
    with conn.cursor() as cur:
        already = len(log.open_before)
        if already and log.source is SLOW:
            view.message(f"{already} connection(s) were open before the window: each keeps "
                         "the long_query_time it opened with, so only its statements slower "
                         "than that are captured; connections opened from now on are "
                         "captured in full")
        view.message("capturing — Ctrl-C ends the window early and keeps what was captured")
        update = view.window(request.seconds)
        start = time.monotonic()
        first = log.written(cur)
        try:
            while (elapsed := time.monotonic() - start) < request.seconds:
                update(elapsed, log.written(cur) - first)
                for name, value in log.changed_by_others(cur).items():
                    if others.get(name, ("",))[0] != value:
                        others[name] = (value, elapsed)
                        view.message(_changed_in_window(name, value, elapsed, log))
                time.sleep(min(0.5, request.seconds - elapsed))
            update(request.seconds, log.written(cur) - first)
        except KeyboardInterrupt:
            ended_early = True
        except pymysql.MySQLError as exc:  # the put-back after it says the rest
            raise UserError(
                f"the window's connection to {server.endpoint.describe()} was lost after "
                f"{format_duration(time.monotonic() - start)} ({refusal(exc)}): the server "
                "restarted or went away; capture again once it runs as usual") from None
    with contextlib.suppress(Exception):  # knowing less is no reason to stop
        active = _active(log.open_before, log.connections_now(conn, ended_early))
    return ended_early, active


def _counted(dest: Path, view: CaptureView) -> tuple[int, set[int], int, set[int]]:
    """The log written out, read back: its statements, their connections, the executions
    of statements prepared before the window (without their values), and their connections;
    said."""
    statements, connections, valueless, prepared_before = 0, set(), 0, set()
    for event in read_log(dest):
        if event.is_statement:
            statements += 1
            connections.add(event.thread)
            if event.command == "Execute" and without_values(event.text):
                valueless += 1
                prepared_before.add(event.thread)
    view.message(f"captured {statements} statement(s) from {len(connections)} connection(s) "
                 f"into {dest}")
    if valueless:
        view.message(f"{valueless} of them are executions of statements prepared before the "
                     "window, which the log shows without their values: a replay leaves them "
                     "out")
    return statements, connections, valueless, prepared_before


def _settings_summary(log: QueryLog, put_back: PutBack, others: dict[str, tuple[str, float]]
                      ) -> dict[str, Any]:
    """Each setting the window changed: its original, the window's value, whether it was put
    back, and, where another session set it during the window, to what and when."""
    return {name: {"original": log.originals.get(name), "window": value,
                   "put_back": name in put_back.restored,
                   # set by another session during the window, and left so
                   **({"set_by_another": {"value": others[name][0],
                                          "after_seconds": round(others[name][1], 1)}}
                      if name in others else {})}
            for name, value in log.changes.items()}


def _reconnect(conn: pymysql.Connection, log: QueryLog, view: CaptureView,
               window: float) -> Reconnected:
    """The connections open before the window ended one at a time, each when idle, for
    their pool to open new ones with the log on; those ended are left out of the log."""
    threads = list(log.open_before)
    view.message(f"--reconnect idle: ending the {len(threads)} connection(s) open before the "
                 f"window one at a time, each once idle {IDLE_FOR_MS:g} ms with no transaction "
                 "that locked or wrote, for their pool to open new ones (stops at the first "
                 "its pool does not replace)")
    with conn.cursor() as cur:
        try:
            done = reconnect_idle(cur, threads, log.own_threads, min(TRY_WITHIN, window))
        except pymysql.MySQLError as exc:
            raise UserError(f"--reconnect idle could not end a connection on "
                            f"{log.server.endpoint.describe()}: {refusal(exc)}") from None
    log.reconnected = set(done.ended)
    view.message(done.said())
    return done


def _back(summary: dict[str, Any]) -> str:
    """What the window's put-back left, in words, from the summary's settings."""
    settings = summary["settings"]
    left = {name: v for name, v in settings.items() if not v["put_back"]}
    if not left:
        return "every setting is back"
    return "every setting is back but " + ", ".join(
        f"{name} (another session set it to {v['set_by_another']['value']!r} during the "
        f"window: left so)" if "set_by_another" in v else name for name, v in left.items())


def _changed_in_window(name: str, value: str, elapsed: float, log: QueryLog) -> str:
    """A setting of the window another session changed during it, and what that does to the
    statements taken from then on."""
    effect = "the statements taken from then on are not all of the load" \
        if log.switch == name or name in ("long_query_time", "log_slow_query_time",
                                          "log_slow_rate_limit", "log_slow_filter",
                                          "min_examined_row_limit",
                                          "log_slow_min_examined_row_limit",
                                          "log_output") \
        else "the log may differ from then on"
    return (f"note: {format_duration(elapsed)} into the window another session set {name} to "
            f"{value!r} (the window set {log.applied.get(name, log.changes.get(name))!r}): "
            f"{effect}; it is left as that session set it, and the window's other settings "
            "are put back at its end; capture again for a whole window")


def _source(asked: str, open_now: int, sees_all: bool) -> tuple[Source, str]:
    """The log a window takes its statements from, and why, in words."""
    if asked != "auto":
        return SOURCES[asked], "--log " + asked
    if not sees_all:
        return GENERAL, ("this user cannot see other users' connections (no PROCESS "
                         "privilege): it sees every connection's statements")
    if open_now:
        return GENERAL, (f"{open_now} other connection(s) are open: it sees their statements, "
                         "the slow log would not")
    return SLOW, "no other connection is open: it times each statement"


def _active(before: dict[int, tuple[str | None, int | None]],
            after: dict[int, tuple[str | None, int | None]]) -> int:
    """How many connections of `before` ran a statement since, as far as the server shows:
    their last statement's id moved; each one it gives no id for counts too. One that closed
    in the window is not counted (its last statements are unknown)."""
    return sum(1 for thread, (_, query) in before.items()
               if query is None or (thread in after and after[thread][1] != query))


def _check_values(log: dict[str, Any], kept: Path, back: str) -> None:
    """Not ready when more than a few of the statements captured have no values: executions
    of statements the application's connections prepared before the window."""
    lost, statements = log["without_values"], log["statements"]
    if not lost or lost <= statements * MOST_WITHOUT_VALUES:
        return
    raise UserError(
        f"not ready: {lost:,} of the {statements:,} statements captured ({lost / statements:.0%})"
        f" are executions of statements {log['without_values_connections']} connection(s) "
        "prepared before the window, and the log shows them without their values (MariaDB "
        "writes a prepared statement's values only when the log was on as it was prepared): "
        f"they cannot be replayed; {back}; capture again with --reconnect idle (knoblab ends "
        "each of the pool's connections once idle, for the pool to reconnect and prepare "
        "again inside the window), or once the application has reconnected (restart its "
        "pool as the window begins), or let it prepare on the client side (e.g. JDBC's "
        f"useServerPrepStmts=false); what it did capture is in {kept}")


def _dump(request: Request, endpoint: Endpoint, plan: DumpPlan, summary: dict[str, Any],
          view: CaptureView) -> int:
    mode, rows = request.data
    summary["dump"] = {"mode": mode, "rows_per_table": rows, "databases": plan.databases,
                       "not_transactional": plan.not_transactional, "file": None, "bytes": 0}
    if not plan.databases:
        return 0
    try:
        progress = view.dumping(max(plan.text_bytes, 1))
        size = run_dump(endpoint, plan, request.out / DUMP, progress)
    except KeyboardInterrupt:
        view.close()
        summary["dump"]["stopped"] = True
        view.message(f"the dump was stopped: no data was kept; the statements are in "
                     f"{request.out / LOG} and {_back(summary)} (no spec was written)")
        return 130
    finally:
        view.close()
    summary["dump"].update(file=DUMP, bytes=size)
    view.message(f"dumped {plan.describe()} into {request.out / DUMP} ({format_size(size)})")
    return 0


def _spec_text(name: str, summary: dict[str, Any], with_data: bool) -> str:
    window = summary["window"]
    server = Endpoint.from_dict(summary["server"]).describe()
    lines = [
        f"# Captured by knoblab capture from {server} ({summary['version']}),",
        f"# {window['start']} to {window['end']}: {summary['log']['statements']} statements "
        f"from {summary['log']['connections']} connections.",
        "#",
        f"#   knoblab tune {SPEC} --budget 2h      (sandboxes only; paths are relative to "
        "this file)",
        f"name = {json.dumps(name + '-capture')}",
        "",
        "[workload]",
        'kind = "replay"',
        f'log = "{LOG}"',
        'speed = "max"',
        "",
    ]
    if with_data:
        lines += ["[dataset]", f'dump = "{DUMP}"', ""]
    configuration = summary.get("configuration") or {}
    settings, left_out = configuration.get("settings") or {}, configuration.get("left_out") or {}
    refused, durability = configuration.get("refused") or {}, configuration.get("durability")
    if settings or left_out or refused:
        lines += ["# The server's own configuration (every global not at the build's default):",
                  "# in force in every trial, the baseline's too, so that recommended.cnf is a",
                  "# change to it."]
        lines += [f"# left out, as a sandbox cannot take it: {name} ({why})"
                  for name, why in sorted(left_out.items())]
        lines += [f"# left out, as a run of this spec refuses it: {name} = "
                  f"{json.dumps(found['value'])}: {found['why']}"
                  for name, found in sorted(refused.items())]
        if configuration.get("not_here"):
            lines += [f"# On the machine it was captured from, knoblab tune refuses it: "
                      f"{configuration['not_here']}"]
        if durability:
            lines += ["# Production gives up durability, and every trial runs as production does:",
                      *(f"#   {name}: {cost}" for name, cost in sorted(durability.items())),
                      "# With this consent knobs = \"auto\" also searches settings that give up",
                      "# durability.",
                      "[server]", "allow_durability_tradeoff = true", ""]
        lines += ["[server.config]"]
        lines += [f"{name} = {json.dumps(value)}" for name, value in sorted(settings.items())]
        lines += [""]
    lines += ["[tune]", 'knobs = "auto"',
              "# Each trial replays a part of the capture sized to --budget: the tune measures",
              "# what a replay of its first 5 s costs, then takes the largest part of which the",
              "# search's share of the budget holds some 30 trials, and says so in one line.",
              '# Pin it with fidelity = "10s" (its first 10 s), or "whole".',
              'fidelity = "auto"', ""]
    found = summary.get("machine")
    if found:
        lines += [f"# The server's machine: {found['memory_gib']} GiB of memory, {found['cpus']} "
                  f"CPU(s) the server may run on ({found['cpu']}), its data on {found['disk']}.",
                  "# A sandbox shaped like it answers for it: on a test machine that can give "
                  "that much,",
                  "# uncomment these lines (knoblab tune says so when it cannot).",
                  "# [machine]",
                  f"# memory = \"{found['memory_gib']}G\"",
                  f"# cpus = {found['cpus']}", ""]
    return "\n".join(lines)


def _machine(server: ExternalServer) -> dict[str, Any] | None:
    """The machine the server runs on, when it is this one (its process is seen here): its
    memory, the CPUs its process may run on, its data directory's file system."""
    if server.pid is None:
        return None
    try:
        cpus = len(os.sched_getaffinity(server.pid))
    except OSError:
        cpus = os.cpu_count() or 1
    here = machine.fingerprint(server.datadir or Path("/"), "")
    return {"memory_gib": max(1, round(psutil.virtual_memory().total / 2**30)),
            "cpus": cpus, "cpu": here["cpu"], "disk": here["disk"], "kernel": here["kernel"]}


# What of a production server's configuration a sandbox cannot or should not take, by name.
_LEFT_OUT = (
    (re.compile(r"(basedir|datadir|socket|pid_file|tmpdir|secure_file_priv|log_error|"
                r"character_sets_dir|lc_messages_dir|plugin_dir|log_bin\w*|relay_log\w*|"
                r"\w*_(file|dir|path|home_dir|basename|index))"),
     "a path on the production machine"),
    (re.compile(r"port|bind_address|skip_networking|skip_name_resolve|extra_port|"
                r"extra_max_connections|report_\w+|proxy_protocol_networks"),
     "the network: a sandbox listens on a private socket only"),
    (re.compile(r"server_id|gtid_\w+|log_slave_updates|log_replica_updates|read_only|"
                r"replicate_\w+|slave_\w+|replica_\w+|master_\w+|rpl_\w+|binlog_\w+|"
                r"sync_binlog|wsrep_\w*|expire_logs_days|binlog_expire_logs_seconds"),
     "replication: a sandbox neither writes a binary log nor replicates"),
    (re.compile(r"plugin_load\w*|plugin_maturity"), "plugins: a sandbox loads its build's own"),
    (re.compile(r"general_log|slow_query_log|log_output|long_query_time|log_slow_\w+|"
                r"min_examined_row_limit|log_queries_not_using_indexes|sql_log_off"),
     "the query logs: a capture's own, and nothing a sandbox's measurements use"),
    (re.compile(r"ssl_\w+|tls_version|require_secure_transport"),
     "TLS: a sandbox's private socket has none"),
    (re.compile(r"init_connect|init_file|init_slave|init_replica"),
     "statements the production server runs at its start or at each connection"),
)


def production_configuration(cur: Any) -> tuple[dict[str, str], dict[str, str]]:
    """The server's globals whose value did not come from the build's default (its option
    files, its command line, a SET GLOBAL: MariaDB's GLOBAL_VALUE_ORIGIN) and differs from
    it, as a sandbox takes them; and those left out, with why. Empty where the server does not
    say where its settings came from."""
    try:
        cur.execute("SELECT LOWER(VARIABLE_NAME), GLOBAL_VALUE FROM "
                    "information_schema.SYSTEM_VARIABLES WHERE GLOBAL_VALUE_ORIGIN IN "
                    "('CONFIG', 'COMMAND-LINE', 'SQL') AND GLOBAL_VALUE IS NOT NULL AND NOT "
                    "GLOBAL_VALUE <=> DEFAULT_VALUE")
    except pymysql.MySQLError:  # no origin to read (MySQL has it elsewhere)
        return {}, {}
    found = cur.fetchall()
    # A plugin loaded from a library: a sandbox loads its build's own only, and does not know
    # its settings (a run refuses an unknown one).
    cur.execute("SELECT LOWER(PLUGIN_NAME), PLUGIN_LIBRARY FROM information_schema.PLUGINS "
                "WHERE PLUGIN_LIBRARY IS NOT NULL AND PLUGIN_STATUS = 'ACTIVE'")
    libraries = {str(plugin): str(library) for plugin, library in cur.fetchall()}
    settings, left_out = {}, {}
    for name, value in found:
        name, value = str(name), str(value)
        why = next((why for pattern, why in _LEFT_OUT if pattern.fullmatch(name)), None)
        if why is None and value.startswith("/"):
            why = "a path on the production machine"
        plugin = next((plugin for plugin in libraries
                       if name == plugin or name.startswith(f"{plugin}_")), None)
        if why is None and plugin is not None:
            why = (f"a setting of the plugin {plugin}, which production loads from "
                   f"{libraries[plugin]}: a sandbox loads only its build's own plugins")
        if why is None:
            settings[name] = value
        else:
            left_out[name] = why
    return settings, left_out


@dataclass(frozen=True)
class Baseline:
    """Production's configuration as the captured spec's [server.config], as a run of the
    spec on this machine's sandboxes takes it."""

    settings: dict[str, str]  # in force in every trial
    refused: dict[str, dict[str, str]]  # left out: name -> its value, and why a run refuses it
    durability: dict[str, str]  # kept, giving up durability: name -> what a crash can cost
    not_here: str | None = None  # why a run on this machine still refuses it (its memory)

    def said(self) -> list[str]:
        """What the capture says of it."""
        lines = []
        if self.refused:
            lines.append("left out of the spec's baseline, as a run of it would refuse them: "
                         + "; ".join(f"{name} = {found['value']} ({found['why']})"
                                     for name, found in self.refused.items()))
        if self.durability:
            lines.append(f"production gives up durability ({_costs(self.durability)}): kept in "
                         "the spec's baseline, as production runs so, with allow_durability_"
                         "tradeoff = true in its [server] (knobs = \"auto\" then also searches "
                         "settings that give up durability)")
        return lines

    def described(self, left_out: dict[str, str]) -> dict[str, Any]:
        """As capture.json keeps it, with what production has that a sandbox cannot take."""
        return {"settings": self.settings, "left_out": left_out, "refused": self.refused,
                "durability": self.durability, "not_here": self.not_here}


def baseline(catalog: Catalog, configured: dict[str, str], workload: Workload) -> Baseline:
    """Production's configuration asked of the checks a run of the captured spec makes
    (`_refusal`), a setting at a time on top of those taken: one a run refuses is left out
    with the check's own words. Giving up durability is production's own choice: kept, with
    the consent written. Memory over this machine's budget is said, and kept: a buffer left at
    the build's default would make every trial, and recommended.cnf, about another server."""
    always = _refusal(catalog, {}, workload)  # the spec's, whatever its configuration
    settings: dict[str, str] = {}
    refused: dict[str, dict[str, str]] = {}
    for name in sorted(configured):
        why = _refusal(catalog, {**settings, name: configured[name]}, workload)
        if why is None or why == always:
            settings[name] = configured[name]
        else:
            refused[name] = {"value": configured[name], "why": why}
    not_here = _refusal(catalog, settings, workload)
    if not_here is None:
        memory = _refusal(catalog, settings, workload, memory=True)
        if memory is not None:
            not_here = (f"{memory}; but production's configuration is every trial's "
                        "baseline (lowered, the tune would be of another server): tune it on "
                        "a machine with the memory it needs")
    durability = safety.durability_costs(
        {catalog.knob(name).name: catalog.knob(name).normalize(value)
         for name, value in settings.items()})
    return Baseline(settings, refused, durability, not_here)


def _refusal(catalog: Catalog, config: dict[str, str], workload: Workload,
             memory: bool = False) -> str | None:
    """The first of the checks a run of the captured spec makes of its [server.config] on
    this machine's sandboxes that refuses `config` (`runner.checks._check_target`'s: what a setting
    is, what a sandbox owns, the replay's connections, safety's with durability consented to
    and, with `memory`, the memory budget), in its own words; None when none does."""
    try:
        base = {catalog.knob(name).name: catalog.knob(name).normalize(value)
                for name, value in config.items()}  # as Spec.base_settings reads them
        names = list(base)
        runner.check_settable(catalog, names)
        runner.check_not_fixed(catalog, [base])
        safety.check_sandbox_owned(names, catalog)
        workload.check(catalog, base)
        safety.check([({}, {})], base, catalog, connections=workload.connections_for,
                     allow_durability_tradeoff=True, memory_budget=None, check_memory=memory)
    except UserError as exc:
        return str(exc)
    return None


def _costs(durability: dict[str, str]) -> str:
    return "; ".join(f"{name}: {cost}" for name, cost in durability.items())


def _replayed(log: Path, back: str) -> Plan:
    """The statements captured as a replay reads them (`knoblab.capture.plan`, kept with the
    replays of this home, where a tune here finds it made): not ready when none of them can
    be replayed."""
    try:
        return plan_for(log, places.knoblab_home())
    except UserError as exc:
        raise UserError(f"not ready: none of the statements captured can be replayed ({exc}); "
                        f"{back}; capture again while the application runs") from None


def _unseen_before(plan: DumpPlan, used: list[str | None]) -> list[str]:
    """What this user lacks to dump the application's databases, known before the window:
    the databases the connections open now use that it cannot see, or, when it sees none at
    all, a sight of them."""
    hidden = unseen_databases(plan, used)
    if hidden:
        return [f"{TO_DUMP} on {', '.join(hidden)} (connections use them now, and this user "
                "cannot see them to dump them)"]
    if not plan.sees_all and not plan.databases:
        return [f"SHOW DATABASES, or {TO_DUMP} on the application's databases (this user sees "
                "none of the server's databases, so none would be dumped)"]
    return []


def _restored_here(store: Store, run_id: str) -> bool:
    """Whether `run_id` is a capture of this store whose settings are back."""
    try:
        run = store.run(run_id)
    except UserError:
        return False
    return run["kind"] == Experiment.CAPTURE and not store.pending_restores(run["id"])


def under_way(store: Store, pending: list[dict[str, Any]]) -> dict[str, str]:
    """The runs of these journal rows still going, which put their settings back themselves
    when they end: run -> why it is known. A run of this machine whose process lives; a
    capture whose connection holds its server's capture lock, from any machine."""
    from knoblab.owners import run_state

    found: dict[str, str] = {}
    servers = {row["run_id"]: row["server"] for row in pending}
    for run_id, stored in servers.items():
        try:
            run = store.run(run_id)
        except UserError:  # journal rows without their run: nothing runs them
            continue
        owner = run["info"].get("owner") or {}
        if owner.get("host") == socket.gethostname() and run_state(run) == RunStatus.RUNNING:
            found[run_id] = f"still running (process {owner.get('pid')})"
        elif not Experiment(run["kind"]).has_points and run["status"] == RunStatus.RUNNING \
                and owner.get("lock"):
            with contextlib.suppress(Exception):  # a server gone: not under way there
                conn = ExternalServer(Endpoint.from_dict(stored)).connect()
                try:
                    with conn.cursor() as cur:
                        if lock_connection(cur) == owner["lock"]:
                            found[run_id] = (f"a {run['kind']} still under way (its "
                                             f"connection {owner['lock']} holds the "
                                             "server's capture lock)")
                finally:
                    conn.close()
    return found


def after_restore(store: Store, run_id: str, stored: dict[str, Any]) -> list[str]:
    """Once `knoblab restore` put back the settings of a capture killed in its window: its
    log removed from the server's data directory and the server's own mysql.slow_log put back
    in place; what was done or is left, as sentences (nothing for other runs)."""
    try:
        if store.run(run_id)["kind"] != Experiment.CAPTURE:
            return []
    except UserError:  # journal rows without their run
        return []
    server = ExternalServer(Endpoint.from_dict(stored))
    said: list[str] = []
    try:
        _, _, datadir = server.probe()
        said += put_aside_back(server, run_id)
    except (UserError, pymysql.MySQLError) as exc:
        return [f"its server's mysql.slow_log could not be checked ({exc}): the next capture "
                "puts it back"]
    log = datadir / f"knoblab-capture-{run_id}.log" if datadir is not None else None
    if log is not None and log.exists():
        try:
            log.unlink()
            said.append(f"removed {log}, the log it left in the server's data directory")
        except OSError as exc:
            said.append(f"its log {log} is left in the server's data directory ("
                        f"{exc.strerror}), with the statements' literals: remove it as the "
                        "server's account or root")
    return said
