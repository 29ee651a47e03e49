"""Replay a captured log: a server's own statements, session by session, on a sandbox.

`[workload] kind = "replay"` with `log = "slow.log"` (a slow query log written at
long_query_time = 0, or a general query log) and, usually, `[dataset] dump = "app.sql.gz"`
for the data they ran on. Each captured connection is one client session that runs its
statements in their captured order; sessions run concurrently, as many at once as were open
at once in the capture (`sessions` to change that), the next one starting when one ends.
`speed = "max"` runs every statement as soon as the previous one of its session answered,
and measures the replay's wall time; `"original"` keeps the captured arrival times and
measures the time the statements took (the latency at the real rate), saying how far behind
the schedule the replay fell.

A log that only reads shares server starts (the blocked design); one that writes starts each
measurement from the loaded data. Whether it writes is decided from its text, conservatively
(`knoblab.capture.plan`), and checked by the server: a replay taken to only read that changes
rows (a view or a trigger calling a stored function that writes) stops the run. Statements that
fail in the sandbox (a missing grant, a temporary table created before the capture began) are
counted per statement class; when more than `max_failing` of a class's statements fail on the
first measurement, the run stops before measuring more, naming the classes.

What the sandbox cannot take is refused before any statement runs, in one line: more sessions
at once than its max_connections leaves besides knoblab's own connections (rather than raising
max_connections: it is a setting the user may be measuring, and sizes the server's memory), a
statement longer than its max_allowed_packet (the server drops the connection it comes on),
a secure_timestamp that keeps the replay from setting the captured clock for the statements
that read it, and databases the log's statements run in that the data lacks, when more than
`max_failing` of a class's statements run in them (a dump made without --databases holds one
database: known from the spec; otherwise the loaded data is asked). A statement never runs in
another database than its own: after a `USE` that failed, a session's statements fail, unsent,
until one succeeds. At `speed = "original"` a measurement lasts the log's span, said before
the run, and a span beyond the timeout (or the budget) is refused.

Every measurement keeps, per statement class (its fingerprint), the count, the total time,
p50/p95/p99, rows returned, errors by code and a checksum of the rows returned (independent
of their order): `knoblab.evidence`'s comparison of classes between configurations is made of
these. Statement texts never leave the plan's folder: details name classes by fingerprint.

The client is sysbench's own engine: its LuaJIT threads play the plan (`replay.lua`) through
the MariaDB C client library, at sysbench's own CPU per statement (docs/benchmarks.md), so that
a replay measures the server rather than its client. `client_cpu_seconds` against the server's
`cpu_seconds` says how much of the machine the client took.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections import defaultdict
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pymysql

from knoblab import datasets, section
from knoblab.capture.plan import Plan, plan_for
from knoblab.catalog import Catalog
from knoblab.connection import SYSTEM_DATABASES, Progress, Server
from knoblab.datasets import Dataset
from knoblab.datasets.dump import DATA_USER, data_account
from knoblab.datasets.empty import EmptyServer
from knoblab.datasets.scan import ScanTable
from knoblab.errors import UserError
from knoblab.keys import Key, Keys
from knoblab.observe import Observation, SecondSampler
from knoblab.places import knoblab_home
from knoblab.records import Evidence
from knoblab.server.dumping import ends_with_parent
from knoblab.stats import Summary
from knoblab.units import format_duration, num, parse_duration, plural
from knoblab.vocabulary import Design, TrialState
from knoblab.workloads.base import (
    Headline,
    Measured,
    Note,
    Recorder,
    Rounds,
    StoredSeconds,
    StoredTrial,
    WorkloadError,
)
from knoblab.workloads.timed import Timed, regime

SPEEDS = ("max", "original")
_SHOWN_CLASSES = 3  # classes named in a refusal
_SHOWN_DATABASES = 5  # databases named in a refusal
# Connections knoblab opens on the sandbox besides the sessions' (counters, settings, the KILL
# that stops a replay): a replay needs this many more than its sessions under max_connections.
OWN_CONNECTIONS = 2
SESSIONS_AT_MOST = 64  # replayed at once unless [workload] sessions says
_FINGERPRINT_SHOWN = 100  # characters of a fingerprint in a message
# At speed original: a replay whose statements started this late (95th percentile) did not
# keep the capture's pace; its times are those of a slower arrival than captured.
BEHIND_LIMIT = 1.0


@dataclass(frozen=True)
class Slice:
    """A part of the capture replayed in place of all of it, for a cheaper measurement: its
    first `seconds` (the sessions begun by then, each up to then), or a `share` of its
    sessions spread evenly over it (whole sessions: the statement mix of each kept)."""

    seconds: float | None = None
    share: float | None = None

    @classmethod
    def from_spec(cls, raw: object, plan: Plan, key: str = "[workload] slice") -> Slice:
        if isinstance(raw, str) and raw.strip().endswith("%"):
            try:
                share = float(raw.strip()[:-1]) / 100
            except ValueError:
                share = math.nan
            if not 0 < share <= 1:
                raise UserError(f"{key} = {raw!r}: a share of the sessions is a "
                                "percentage above 0 and at most 100, e.g. \"25%\"")
            return cls(share=share)
        seconds = parse_duration(raw, key)
        if plan.span is None:
            raise UserError(f"{key} = {raw!r}: the log holds no times to cut it by; give a "
                            "share of its sessions instead, e.g. \"25%\"")
        return cls(seconds=seconds)

    def sessions(self, plan: Plan) -> np.ndarray:
        """The plan's sessions in the slice, by their index (in the order they began)."""
        count = plan.sessions
        if self.seconds is not None:
            return np.flatnonzero(plan.index["first"] <= self.seconds)
        kept = max(1, round(count * (self.share or 1.0)))
        return np.unique(np.linspace(0, count - 1, kept).round().astype(int))

    def covers(self, plan: Plan) -> bool:
        """Whether the slice holds the whole capture: every session, each to its end."""
        return len(self.sessions(plan)) == plan.sessions and (
            self.seconds is None or plan.span is None or self.seconds >= plan.span)

    def said(self, plan: Plan) -> str:
        """What is replayed, as it is (not as asked: a share keeps at least one session)."""
        kept, count = len(self.sessions(plan)), plan.sessions
        if self.seconds is not None:
            return (f"the first {format_duration(self.seconds)} ({kept:,} of its "
                    f"{plural(count, 'session')})")
        share = kept / count if count else 0.0
        shown = f"{share:.0%}" if share >= 0.01 else f"{share * 100:.2g}%"
        return f"{shown} of the sessions ({kept:,} of {count:,})"

    def describe(self) -> dict[str, float]:
        return {"seconds": self.seconds} if self.seconds is not None else \
            {"share": float(self.share or 1.0)}


@dataclass(frozen=True)
class ReplayWorkload(Timed):
    """A captured log's sessions replayed; the measurement is the replay's wall time (speed
    max) or its statements' total time (speed original)."""

    kind: ClassVar[str] = "replay"
    parameters: ClassVar[tuple[str, ...]] = ()
    keys: ClassVar[Keys] = Keys(
        Key("kind", "A captured log's sessions replayed by sysbench's engine; the measurement "
            "is the replay's wall time (speed \"max\") or its statements' total time (speed "
            "\"original\").", "text", choices=("replay",)),
        Key("log", "The captured log, beside the spec: a slow query log at long_query_time = 0 "
            "or a general query log (knoblab capture writes one)."),
        Key("speed", "\"max\": each session's statements as fast as the server answers; "
            "\"original\": at the captured arrival times.", "text", '"max"',
            choices=SPEEDS),
        Key("sessions", "Sessions replayed at once.", "a whole number",
            f"the most the capture had open at once, up to {SESSIONS_AT_MOST}", 1, 1000),
        Key("max_failing", "The share of a statement class's statements that may fail on the "
            "first measurement before the replay is refused.", "a number", "0.05", 0.0, 1.0),
        Key("timeout", "Seconds one replay may take before it is stopped and the measurement "
            "failed.", "a number of seconds", "3600", 0.001, 7 * 86400),
        Key("prepared", "What the application prepared is replayed prepared (a general log "
            "shows it).", "true or false", "true"),
        Key("slice", "Only part of the capture: its first seconds (\"60s\") or a share of its "
            "sessions (\"25%\").", "a duration or a share"),
    ) | Rounds.KEYS

    log: Path
    plan: Plan
    speed: str = "max"
    sessions: int = 1  # replayed at once
    max_failing: float = 0.05  # of a class's statements, on the first measurement
    timeout: float = 3600.0
    prepared: bool = True  # what the application prepared is prepared again
    slice: Slice | None = None  # a part of the capture replayed in place of all of it
    rounds: Rounds = Rounds()
    data: Dataset | None = None  # [dataset] (a dump); None: an empty server
    warnings: tuple[str, ...] = ()
    # [sweep] values of the settings the sandbox is checked for (max_connections, ...)
    swept: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    sessions_given: bool = False  # [workload] sessions set, rather than the capture's peak
    # Whether the first measurement (whose failures refuse the run) is still to come.
    _first: list[bool] = field(default_factory=lambda: [True], compare=False, repr=False)

    @property
    def writes_data(self) -> bool:
        return self.plan.writes

    @property
    def least_seconds(self) -> float:
        """At speed original a measurement keeps the log's pace: it lasts the log's span (or
        its slice's)."""
        if self.speed != "original":
            return 0.0
        span = float(self.plan.span or 0.0)
        return min(span, self.slice.seconds) if self.slice and self.slice.seconds else span

    @property
    def span(self) -> float | None:
        """The capture's span (its slice's, when cut by time): what a cut takes the first
        seconds of; None for a share of its sessions (a cut by time would replace it)."""
        if self.plan.span is None or (self.slice and self.slice.share is not None):
            return None
        whole = float(self.plan.span)
        return min(whole, self.slice.seconds) if self.slice and self.slice.seconds else whole

    @property
    def workers(self) -> int:
        """Sessions replayed at once: no more than the log (or its slice) holds."""
        return min(self.sessions, len(self.replayed_sessions()))

    def replayed_sessions(self) -> np.ndarray:
        """The plan's sessions this replay runs, by their index: all, or its slice's."""
        return self.slice.sessions(self.plan) if self.slice else np.arange(self.plan.sessions)

    def sliced(self, part: Slice | None) -> ReplayWorkload:
        """This replay of a part of the capture (None: the whole)."""
        return dataclasses.replace(self, slice=part, _first=self._first)

    def cut(self, raw: object, key: str) -> tuple[ReplayWorkload, str]:
        """A part of the capture ([tune] screen): its first seconds, or a share of its
        sessions; refused when it is no less than what this replay already runs."""
        part = Slice.from_spec(raw, self.plan, key)
        cut = self.sliced(part)
        if len(cut.replayed_sessions()) >= len(self.replayed_sessions()) and \
                (part.seconds is None or part.seconds >= float(self.plan.span or 0.0)):
            raise UserError(f"{key} = {raw!r} holds the whole capture ({part.said(self.plan)}):"
                            " give a shorter time or a smaller share")
        return cut, f"{part.said(self.plan)} of the capture"

    # -- the spec -----------------------------------------------------------------------------

    @classmethod
    def from_spec(cls, workload: dict[str, Any], dataset: dict[str, Any],
                  sweep: dict[str, list[Any]], base_dir: Path | None) -> ReplayWorkload:
        data = datasets.read(dataset, base_dir, sweep, refused={ScanTable.kind: (
            "[dataset]: a replay runs on the data of a dump ([dataset] dump = \"FILE\"), or on "
            "an empty server; remove the other keys")}) if dataset else None
        name = section.text(workload, "log", "workload", "")
        if not name.strip():
            raise UserError("[workload] log: give the captured log to replay, e.g. log = "
                            "\"slow.log\" (a slow query log at long_query_time = 0, or a "
                            "general query log)")
        speed = section.text(workload, "speed", "workload", "max")
        if speed not in SPEEDS:
            raise UserError(f"[workload] speed = {speed!r}: use \"max\" (as fast as the server "
                            "answers) or \"original\" (the captured arrival times)")
        client_binary()
        log = (base_dir or Path.cwd()) / name
        plan = plan_for(log, knoblab_home(), _plan_progress(log))
        sessions = int(section.number(workload, "sessions", "workload",
                                      min(plan.peak, SESSIONS_AT_MOST), int, 1, 1000))
        if speed == "original" and plan.span is None:
            raise UserError(f"[workload] speed = \"original\": {log} holds no times to keep; "
                            "use speed = \"max\"")
        max_failing = section.number(workload, "max_failing", "workload", 0.05, float, 0.0, 1.0)
        timeout = section.number(workload, "timeout", "workload", 3600.0, float, 0.001,
                                 7 * 86400.0)
        notes = []
        if speed == "original" and plan.span is not None:
            span = format_duration(plan.span)
            if plan.span >= timeout:
                raise UserError(
                    f"[workload] speed = \"original\": a measurement keeps the log's pace and "
                    f"lasts its span, {span}, beyond [workload] timeout = {timeout:g} s; raise "
                    f"the timeout (e.g. timeout = {math.ceil(plan.span * 1.2 + 60)}), replay a "
                    "shorter log, or use speed = \"max\"")
            notes.append(f"speed = \"original\": each measurement keeps the log's pace and lasts "
                         f"its span, {span}")
        if data is not None and data.known_databases is not None:
            # Data whose databases are known (a dump made without --databases loads into its
            # one): what else the log's statements use is known to be missing now, before
            # anything is loaded.
            lacking = _Lacking(plan, set(data.known_databases))
            if lacking.statements:
                notes.append(lacking.said(max_failing, data))
        if data is None:
            notes.append("no [dataset] dump: the statements run on an empty server, where "
                         "most will fail; give the data they ran on with [dataset] dump")
        prepared = section.flag(workload, "prepared", "workload") \
            if "prepared" in workload else True
        part = Slice.from_spec(workload["slice"], plan) if "slice" in workload else None
        if part is not None and part.covers(plan):
            whole = format_duration(plan.span) + ", " if plan.span else ""
            notes.append(f"slice = {workload['slice']!r} holds the whole capture ({whole}"
                         f"{plural(plan.sessions, 'session')}): all of it is replayed")
        elif part is not None:
            notes.append(f"slice = {workload['slice']!r}: {part.said(plan)} of the capture is "
                         "replayed, not all of it")
        if plan.source == "slow":
            notes.append("a slow log does not say which statements the application prepared: "
                         "every statement is replayed as text (the general log says)")
        elif plan.prepared and not prepared:
            notes.append(f"prepared = false: the {plan.prepared:,} statements the application "
                         "prepared are replayed as text")
        if plan.skipped:
            left = "; ".join(f"{why}: {n:,}" for why, n in plan.skipped.items())
            notes.append(f"left out of the replay: {left}")
        if sessions < min(plan.peak, 1000) and "sessions" not in workload:
            at_once = min(sessions, len(part.sessions(plan)) if part else plan.sessions)
            notes.append(f"the capture had {plan.peak} sessions open at once; {at_once} are "
                         "replayed at once (set [workload] sessions to change it)")
        return cls(
            log=log, plan=plan, speed=speed, sessions=sessions, max_failing=max_failing,
            prepared=prepared, slice=part,
            timeout=timeout, rounds=Rounds.from_spec(workload), data=data, warnings=tuple(notes),
            swept={name: tuple(sweep[name]) for name in _CHECKED if name in sweep},
            sessions_given="sessions" in workload)

    def parameter_axis(self, name: str, values: list[Any]) -> list[str]:
        raise UserError(f"[sweep] {name}: a replay sweeps server settings only")

    @classmethod
    def evidence(cls, trials: list[StoredTrial], summary: Summary | None,
                 stored: StoredSeconds, statistics: Mapping[str, Any]) -> dict[str, Any]:
        """A timed point's figures and, at speed original, how far behind the capture's
        schedule its statements started: the medians over its runs of each run's median
        and 95th percentile lag (a run's own figures are in measurements.csv)."""
        found = super().evidence(trials, summary, stored, statistics)
        lags = [(_seconds(t.details.get("behind_median_seconds")), p95) for t in trials
                if t.status == TrialState.DONE
                and (p95 := _seconds(t.details.get("behind_p95_seconds"))) is not None]
        if lags:
            # A run stored before its median lag was kept: its p95 stands in (a bound above).
            found["behind"] = {
                "median": float(np.median([p95 if m is None else m for m, p95 in lags])),
                "p95": float(np.median([p95 for _, p95 in lags]))}
        return found

    @classmethod
    def notes(cls, points: Sequence[tuple[str, Evidence]]) -> list[Note]:
        """The regime's rule, and at speed original how far behind the capture's schedule the
        statements started: a warning where it fell behind by more than BEHIND_LIMIT."""
        notes = super().notes(points)
        behind = [(label, lag) for label, figures in points if (lag := figures.own.get("behind"))]
        if behind:
            said = "; ".join(f"{label}: {num(lag['median'])} s (95% within {num(lag['p95'])} s)"
                             for label, lag in behind)
            notes.append(("Behind the capture's schedule (speed = \"original\"), how late the "
                          f"statements started, median per run: {said}.", False))
            late = ", ".join(label for label, lag in behind if lag["p95"] > BEHIND_LIMIT)
            if late:
                notes.append((f"The replay fell behind the capture's schedule by more than "
                              f"{BEHIND_LIMIT:g} s at {late}: it did not replay at the original "
                              "speed there, and its times are those of a slower arrival than "
                              "captured.", True))
        return notes

    def check(self, catalog: Catalog, settings: Mapping[str, str]) -> None:
        """The sandbox takes the replay, with the base's settings (or the server's defaults)
        and every swept value: the sessions fit under max_connections, the statements under
        max_allowed_packet, and secure_timestamp lets the captured clock be set. A value set
        otherwise (a [[step]], a search) is checked by the measurement, before any statement
        runs."""
        for value, where in _values(catalog, settings, self.swept, "max_connections"):
            with contextlib.suppress(TypeError, ValueError):
                self._check_connections(int(value), where, first=True)
        for value, where in _values(catalog, settings, self.swept, "max_allowed_packet"):
            with contextlib.suppress(TypeError, ValueError):
                self._check_packet(int(value), where, first=True)
        for value, where in _values(catalog, settings, self.swept, "secure_timestamp"):
            self._check_clock(value, where, first=True)

    def _check_connections(self, max_connections: int, where: str, first: bool) -> None:
        need = self.workers + OWN_CONNECTIONS
        if need <= max_connections:
            return
        given = "[workload] sessions" if self.sessions_given else \
            "the most the capture had open at once; [workload] sessions"
        message = (f"{self.workers} sessions replayed at once ({given}) and knoblab's own "
                   f"{OWN_CONNECTIONS} connections need max_connections = {need}, and the "
                   f"sandbox takes {max_connections} ({where})")
        if first:
            raise UserError(f"{message}: lower [workload] sessions to "
                            f"{max(max_connections - OWN_CONNECTIONS, 1)}, or give "
                            f"max_connections = {need} or more ([server.config] or [sweep])")
        raise WorkloadError(message)

    def _check_packet(self, max_allowed_packet: int, where: str, first: bool) -> None:
        """The longest statement fits in a packet the server takes: it drops the connection
        a longer one comes on (2006, server has gone away), and the replay with it."""
        plan = self.plan
        if plan.largest < max_allowed_packet:
            return
        message = (f"the log holds a statement of {_size(plan.largest)} "
                   f"('{_short(plan.classes[plan.largest_class].fingerprint)}'), longer than "
                   f"max_allowed_packet = {_size(max_allowed_packet)} ({where}): the server "
                   "drops the connection such a statement comes on")
        if first:
            raise UserError(f"{message}; give max_allowed_packet = \"{_packet_for(plan.largest)}\""
                            " or more ([server.config] or [sweep])")
        raise WorkloadError(message)

    def _check_clock(self, secure_timestamp: str, where: str, first: bool) -> None:
        """The captured clock can be set: a statement that reads it (NOW(), ...) is replayed
        after a SET timestamp to the time it was captured at, which secure_timestamp other
        than NO refuses to the data account the replay runs as."""
        if str(secure_timestamp).upper() == "NO" or not self.plan.clock:
            return
        message = (f"secure_timestamp = {secure_timestamp} ({where}) refuses the replay's SET "
                   f"timestamp, which gives the {self.plan.clock:,} statements that read the "
                   "clock (NOW(), ...) the time they were captured at: they would see the "
                   "replay's time, and their rows differ between measurements")
        if first:
            raise UserError(f"{message}; set secure_timestamp = \"NO\" in [server.config] "
                            "(the sandbox's clock is the replay's to set)")
        raise WorkloadError(message)

    def check_running_server(self, where: str, datadir: Path | None) -> None:
        raise UserError(f"{where}: a replay runs a captured log's statements, writes among "
                        "them, on sandboxes only; remove [server] kind = \"external\" to let "
                        "knoblab start its own servers")

    # -- the data template --------------------------------------------------------------------

    def dataset(self, requested: Mapping[str, str]) -> Dataset:
        return self.data or EmptyServer(self.kind)

    def connections_for(self, requested: Mapping[str, str]) -> int:
        return self.workers + OWN_CONNECTIONS

    # -- the measurement ----------------------------------------------------------------------

    def measure(self, server: Server, requested: Mapping[str, str], session_knobs: list[str],
                recorder: Recorder) -> Measured:
        with SecondSampler(server.pid) as sampler:
            measured = self.replay(server)
        recorder.os_seconds(sampler.take())
        return measured

    def replay(self, server: Server) -> Measured:
        """Every session replayed once; WorkloadError when the server fails or the timeout
        passes, UserError when the first measurement's statements fail beyond max_failing."""
        if server.socket is None:
            raise WorkloadError("a replay needs the server's local socket")
        first = self._first[0]
        found = _sandbox(server)
        # What the sandbox cannot take is refused before any statement runs.
        self._check_connections(found.max_connections, "this configuration's max_connections",
                                first)
        self._check_packet(found.max_allowed_packet, "this configuration's", first)
        self._check_clock(found.secure_timestamp, "this configuration's", first)
        present = found.databases
        lacking = _Lacking(self.plan, present)
        if lacking.statements:
            lacking.said(self.max_failing, self.data)
        # The sessions log in as the data account: a log's statements get the privileges of
        # the data and nothing else (no server settings, files, plugins or accounts).
        data_account(server)
        run = _Replay(self, str(server.socket), server, found.max_allowed_packet)
        try:
            with Observation(server) as seen:
                run.go()
        finally:
            run.shut_down()
        classes = run.classes
        databases = run.databases
        self._first[0] = False
        self._refuse_failing(classes, databases, first)
        self._refuse_unset_clock(run.clock_errors, first)
        self._refuse_changed_rows(seen.result["status"], first)
        statements = sum(c["n"] for c in classes.values())
        seconds = run.seconds if self.speed == "max" else \
            sum(c["seconds"] for c in classes.values())
        figures = seen.result["os"]
        cpu_share = figures["server_cpu_seconds"] / run.seconds if run.seconds > 0 else 0.0
        client_cpu = run.client_cpu
        details: dict[str, Any] = {
            "statements": statements,
            "errors": sum(sum(c["errors"].values()) for c in classes.values()),
            "wall_seconds": round(run.seconds, 6),
            "statements_per_second": round(statements / run.seconds, 3) if run.seconds else None,
            "client_cpu_seconds": round(client_cpu, 4),
            "client_cpu_share": round(client_cpu / figures["server_cpu_seconds"], 3)
            if figures["server_cpu_seconds"] > 0 else None,
            "cpu_seconds": figures["server_cpu_seconds"],
            "cpu_share": round(cpu_share, 3),
            "iowait_share": figures["cpu_iowait"],
            "read_bytes": figures["server_read_bytes"],
            "write_bytes": figures["server_write_bytes"],
            "regime": regime(cpu_share, figures["cpu_iowait"],
                             figures["server_read_bytes"] + figures["server_write_bytes"]),
            "classes": classes,
            **({"prepared_as_text": as_text} if (as_text := sum(
                c.get("as_text", 0) for c in classes.values())) else {}),
            **({"prepared_again": again} if (again := sum(
                c.get("reprepared", 0) for c in classes.values())) else {}),
            **({"use_errors": databases} if databases else {}),
            **({"clock_errors": run.clock_errors} if run.clock_errors else {}),
            **({"missing_databases": lacking.statements} if lacking.statements else {}),
            "os": figures,
            "status": seen.result["status"],
            "levels": seen.result["levels"],
        }
        if self.speed == "original":
            late = run.late
            details["behind_median_seconds"] = round(float(np.median(late)), 6) \
                if late.size else 0.0
            details["behind_p95_seconds"] = round(float(np.quantile(late, 0.95)), 6) \
                if late.size else 0.0
            details["behind_max_seconds"] = round(float(late.max()), 6) if late.size else 0.0
        return Measured(seconds, details)

    def _refuse_failing(self, classes: dict[str, dict[str, Any]],
                        databases: Mapping[str, str], first: bool) -> None:
        failing = sorted(((sum(c["errors"].values()) / c["n"], cid) for cid, c in classes.items()
                          if c["n"] and sum(c["errors"].values()) / c["n"] > self.max_failing),
                         reverse=True)
        if not failing:
            return
        by_id = {c.id: c for c in self.plan.classes}
        named = "; ".join(
            f"{share:.0%} of '{_short(by_id[cid].fingerprint)}' "
            f"({_codes(classes[cid]['errors'])})" for share, cid in failing[:_SHOWN_CLASSES])
        more = f" and {len(failing) - _SHOWN_CLASSES} more" if len(failing) > _SHOWN_CLASSES \
            else ""
        # A database the sandbox lacks makes every statement after its USE fail: said first.
        missing = "".join(f"USE `{name}` failed (error {code}: the data lacks that database); "
                          for name, code in sorted(databases.items()))
        message = (f"statements fail in the sandbox: {missing}{named}{more}; above "
                   f"max_failing = {self.max_failing:g}")
        if first:
            raise UserError(f"{message}. Give the data they need ([dataset] dump) and check "
                            "the log; or raise [workload] max_failing to replay anyway")
        raise WorkloadError(f"{message} under this configuration")

    def _refuse_unset_clock(self, errors: Mapping[str, int], first: bool) -> None:
        """The captured clock set before the statements that read it: beyond max_failing
        of them, the replay's clock readings are not the capture's."""
        failed = sum(errors.values())
        if not failed or failed / max(self.plan.clock, 1) <= self.max_failing:
            return
        message = (f"SET timestamp failed before {failed:,} of the {self.plan.clock:,} "
                   f"statements that read the clock ({_codes(errors)}): they saw the replay's "
                   f"time, not the captured one; above max_failing = {self.max_failing:g}")
        if first:
            raise UserError(f"{message}. Let the data account set it (secure_timestamp = "
                            "\"NO\"), or raise [workload] max_failing to replay anyway")
        raise WorkloadError(f"{message} under this configuration")

    def _refuse_changed_rows(self, status: Mapping[str, float], first: bool) -> None:
        """A log taken to only read shares server starts: rows it changed after all would
        reach the measurements after it."""
        if self.plan.writes or self.rounds.design == Design.RESTARTS:
            return
        changed = _rows_changed(status)
        if not changed:
            return
        message = (f"the log was taken to only read, but its replay changed {changed:,} rows (a "
                   "stored function, trigger or view that writes?), and measurements sharing a "
                   "server start would not see the same data")
        if not first:
            raise WorkloadError(message)
        raise UserError(f"{message}: set [workload] design = \"restarts\", so that each "
                        "measurement starts from the loaded data")

    @classmethod
    def headline(cls, described: Mapping[str, Any], swept: Collection[str]) -> Headline:
        at_once = described.get("at_once", described.get("sessions"))
        return Headline(str(described.get("title") or cls.kind), f"the {cls.kind} workload",
                        at_once=at_once if isinstance(at_once, int) and at_once > 1 else 1)

    @classmethod
    def statement_classes(cls, described: Mapping[str, Any]) -> dict[str, str]:
        return {c["id"]: c["fingerprint"] for c in described.get("classes") or ()}

    def describe(self) -> dict[str, object]:
        """A plain dict for the results JSON: the log's summary and its classes, by
        fingerprint (never a statement's literal values)."""
        plan = self.plan
        # A slice's own figures, not the whole log's: its sessions (its statements and
        # classes are known only once replayed).
        sliced = self.slice is not None and not self.slice.covers(plan)
        whole = (f"{plan.statements:,} statements, "
                 f"{plural(len(plan.classes), 'class', 'classes')}, "
                 f"{plural(plan.sessions, 'session')}")
        return {
            "kind": "replay",
            "title": f"replay of {self.log.name}: "
                     + (f"a slice, {self.slice.said(plan)}" if sliced and self.slice else whole)
                     + f" ({self.workers} at once), speed {self.speed}",
            "at_once": self.workers,
            "log": str(self.log),
            "speed": self.speed,
            "sessions": self.sessions,
            "max_failing": self.max_failing,
            "prepared": self.prepared,
            **({"slice": self.slice.describe()} if self.slice else {}),
            "timeout": self.timeout,
            "plan": self.plan.summary(),
            "classes": [{"id": c.id, "fingerprint": c.fingerprint, "count": c.count,
                         "reads": c.reads} for c in self.plan.classes],
            **self.dataset({}).pinned(),
        }


def _seconds(value: object) -> float | None:
    """A stored figure in seconds, or None when absent or not a finite number."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return seconds if math.isfinite(seconds) else None


def _plan_progress(log: Path) -> Progress | None:
    """A progress bar while a large log is read for the first time."""
    try:
        large = log.stat().st_size > 32 << 20
    except OSError:
        return None  # plan_for says why
    if not large:
        return None
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    from knoblab import terminal

    bar = Progress(BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                   console=terminal.stderr(), transient=True)
    task = bar.add_task("reading the log", total=None)
    bar.start()

    def told(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)
        if done >= total:
            bar.stop()

    return told


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _FINGERPRINT_SHOWN else text[:_FINGERPRINT_SHOWN - 3] + "..."


def _codes(errors: Mapping[str, int]) -> str:
    return ", ".join(f"error {code} x{n}" for code, n in
                     sorted(errors.items(), key=lambda item: -item[1]))


def _size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n:,} bytes"


def _packet_for(length: int) -> str:
    """A max_allowed_packet a statement of `length` bytes fits in (with its packet's
    header): its MiB, rounded up."""
    return f"{math.ceil((length + 1024) / (1 << 20))}M"


# The settings the sandbox is checked for (ReplayWorkload.check), by their [sweep] name.
_CHECKED = ("max_connections", "max_allowed_packet", "secure_timestamp")


def _values(catalog: Catalog, settings: Mapping[str, str], swept: Mapping[str, tuple[Any, ...]],
            name: str) -> list[tuple[str, str]]:
    """A setting's values the points run with, and where each comes from: the base's (or
    the server's default), or every swept value (each point has one of its own, and the
    base's is never used)."""
    knob = catalog.knobs.get(name)
    if knob is None:
        return []
    given = settings.get(knob.name)
    values = [] if swept.get(name) else [
        (given, "[server.config]") if given else (knob.default_value(), "the server's default")]
    values += [(raw, "[sweep]") for raw in swept.get(name, ())]
    found = []
    for value, where in values:
        with contextlib.suppress(UserError):  # an invalid value is the spec's to refuse
            found.append((knob.normalize(value), where))
    return found


@dataclass(frozen=True)
class _Found:
    """What a replay needs to know of the sandbox before it runs."""

    databases: set[str]
    max_connections: int
    max_allowed_packet: int
    secure_timestamp: str


def _sandbox(server: Server) -> _Found:
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA")
            present = {str(name) for (name,) in cur.fetchall()}
            # secure_timestamp is MariaDB's: MySQL lets any account set the clock.
            cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN ('max_connections', "
                        "'max_allowed_packet', 'secure_timestamp')")
            found = {str(name).lower(): str(value) for name, value in cur.fetchall()}
            return _Found(present, int(found["max_connections"]),
                          int(found["max_allowed_packet"]),
                          found.get("secure_timestamp", "NO"))
    finally:
        conn.close()


class _Lacking:
    """The log's databases that the data lacks: how many statements run in each, and the
    share of its statements each class would lose."""

    def __init__(self, plan: Plan, present: set[str]) -> None:
        self.statements: dict[str, int] = {}
        self.worst, self.worst_class = 0.0, ""
        for kind in plan.classes:
            lost = 0
            for name, count in kind.databases.items():
                if name not in present and name.lower() not in SYSTEM_DATABASES:
                    self.statements[name] = self.statements.get(name, 0) + count
                    lost += count
            if kind.count and lost / kind.count > self.worst:
                self.worst, self.worst_class = lost / kind.count, kind.fingerprint
        self.used = frozenset(name for kind in plan.classes for name in kind.databases)

    def said(self, max_failing: float, data: Dataset | None) -> str:
        """The sentence saying them, when their statements stay within max_failing (they
        fail, unsent); else UserError, with the fix."""
        ranked = sorted(self.statements.items(), key=lambda item: (-item[1], item[0]))
        names = ", ".join(f"`{name}` ({count:,} statement{'s' if count != 1 else ''})"
                          for name, count in ranked[:_SHOWN_DATABASES])
        if len(ranked) > _SHOWN_DATABASES:
            names += f" and {len(ranked) - _SHOWN_DATABASES} more"
        what = f"the data lacks databases the log's statements run in: {names}"
        if self.worst <= max_failing:
            return (f"{what}; their statements fail in the replay, unsent ({self.worst:.0%} "
                    f"of a class at most, within max_failing = {max_failing:g})")
        into = data.workload_database if data else None
        if data is None or into is None:
            fix = "give the data they ran on with [dataset] dump"
        elif data.known_databases is not None and len(ranked) == 1 and into not in self.used:
            fix = (f"load the dump into the log's database: [dataset] database = "
                   f"\"{ranked[0][0]}\"")
        else:
            fix = ("give a dump that holds them too (mariadb-dump --databases "
                   + " ".join([into, *(name for name, _ in ranked)]) + ")")
        raise UserError(f"{what}; {self.worst:.0%} of '{_short(self.worst_class)}' would fail "
                        f"there, above max_failing = {max_failing:g}: {fix}, or set [workload] "
                        f"max_failing = {math.ceil(self.worst * 100) / 100:g} to replay "
                        "without them")


def _rows_changed(status: Mapping[str, float]) -> int:
    """Rows of tables written during a measurement, from the server's counters: MariaDB's
    Handler_* leave out its internal temporary tables (counted in Handler_tmp_*); MySQL's do
    not, so InnoDB's row counters are taken there."""
    names = ("handler_write", "handler_update", "handler_delete") \
        if "handler_tmp_write" in status else \
        ("innodb_rows_inserted", "innodb_rows_updated", "innodb_rows_deleted")
    return int(sum(max(status.get(name, 0.0), 0.0) for name in names))


# --- the replay -----------------------------------------------------------------------------

# The client: sysbench's LuaJIT threads playing the plan through libmariadb (replay.lua says
# how it reads its set-up and writes its figures).
CLIENT_SCRIPT = Path(__file__).with_name("replay.lua")
_TIME = np.dtype([("kind", "<i4"), ("seconds", "<f4")])
# A session as the client reads it (its knoblab_session), whatever else the plan keeps of it.
_CLIENT_SESSION = np.dtype([("file", "<i4"), ("offset", "<i8"), ("length", "<i8"),
                            ("first", "<f8"), ("last", "<f8"), ("statements", "<i8")])
_CHECKSUM_MOD = 1 << 52  # the client sums its rows' CRCs modulo this
_CLOCK_KIND = -2  # the client's kind for a SET timestamp (knoblab.capture.plan.TIMESTAMP)
_OUTPUT_SHOWN = 300  # characters of the client's own output in a failure


def client_binary() -> str:
    """The sysbench that runs the replay's client; a UserError when there is none."""
    found = shutil.which("sysbench")
    if found is None:
        raise UserError("a replay's client runs in sysbench, which is not on PATH: install "
                        "it (apt-get install sysbench)")
    return found


class _Replay:
    """One replay of the plan: the client started, waited for, stopped whatever happens, and
    its figures read back."""

    def __init__(self, workload: ReplayWorkload, socket: str, server: Server,
                 max_allowed_packet: int) -> None:
        self.workload, self.plan, self.socket, self.server = workload, workload.plan, socket, \
            server
        self.max_allowed_packet = max_allowed_packet
        self.threads = workload.workers
        self.process: subprocess.Popen[bytes] | None = None
        self.out = Path(tempfile.mkdtemp(prefix="replay-", dir=knoblab_home()))  # 0700
        self.seconds = 0.0
        self.client_cpu = 0.0
        self.databases: dict[str, str] = {}  # a USE that failed: its error
        self.late = np.empty(0)
        self.classes: dict[str, dict[str, Any]] = {}
        self.clock_errors: dict[str, int] = {}  # a SET timestamp that failed, by its error

    def go(self) -> None:
        """The replay, to its end; WorkloadError when the client fails or the timeout
        passes."""
        (self.out / "files.txt").write_text("".join(f"{name}\n" for name in self.plan.files))
        replayed = self.plan.index[self.workload.replayed_sessions()]
        sessions = np.empty(replayed.size, _CLIENT_SESSION)
        for name in _CLIENT_SESSION.names or ():
            sessions[name] = replayed[name]
        (self.out / "sessions.bin").write_bytes(sessions.tobytes())
        (self.out / "next").write_bytes(bytes(8))
        (self.out / "reads.bin").write_bytes(bytes(c.reads for c in self.plan.classes))
        env = {**os.environ, "KNOBLAB_REPLAY_PLAN": str(self.plan.folder),
               "KNOBLAB_REPLAY_OUT": str(self.out), "KNOBLAB_REPLAY_SOCKET": self.socket,
               "KNOBLAB_REPLAY_USER": DATA_USER,
               "KNOBLAB_REPLAY_DATABASE": self.workload.dataset({}).workload_database or "",
               "KNOBLAB_REPLAY_SPEED": self.workload.speed,
               "KNOBLAB_REPLAY_PREPARED": "1" if self.workload.prepared else "0",
               "KNOBLAB_REPLAY_MAX_PACKET": str(self.max_allowed_packet),
               "KNOBLAB_REPLAY_UNTIL": str(part.seconds) if (part := self.workload.slice)
               and part.seconds is not None else ""}
        with (self.out / "client.out").open("wb") as output:
            self.process = subprocess.Popen(
                [client_binary(), str(CLIENT_SCRIPT), f"--threads={self.threads}", "--time=0",
                 "--events=0", "run"], cwd=self.out, env=env, stdin=subprocess.DEVNULL,
                stdout=output, stderr=subprocess.STDOUT,
                start_new_session=True,  # a terminal's Ctrl-C reaches knoblab, which stops it
                preexec_fn=ends_with_parent())
        status = self._wait(self.process.pid, self.workload.timeout)
        self.process.returncode = os.waitstatus_to_exitcode(status)
        self._read(self.process.returncode)

    def _wait(self, pid: int, timeout: float) -> int:
        """The client's exit status, its CPU time kept; WorkloadError past the timeout."""
        with _pidfd(pid) as handle:
            poller = select.poll()
            poller.register(handle, select.POLLIN)
            if not poller.poll(max(timeout, 0.0) * 1000):
                raise WorkloadError(f"the replay exceeded the timeout of {timeout:g} s")
        _, status, usage = os.wait4(pid, 0)
        self.client_cpu = usage.ru_utime + usage.ru_stime
        return status

    def _read(self, code: int) -> None:
        threads = [_thread_figures(path) for path in sorted(self.out.glob("thread-*.txt"))]
        failures = [t["fail"] for t in threads if t.get("fail")]
        oversized = [t["packet"] for t in threads if t.get("packet")]
        if oversized:
            kind, length = oversized[0]
            raise WorkloadError(
                f"the server dropped a replay connection on a statement of {_size(length)} "
                f"('{_short(self.plan.classes[kind].fingerprint)}'), longer than its "
                f"max_allowed_packet = {_size(self.max_allowed_packet)}: give "
                f"max_allowed_packet = \"{_packet_for(length)}\" or more")
        if failures:
            raise WorkloadError(str(failures[0]))
        if code != 0 or len(threads) != self.threads:
            said = " ".join((self.out / "client.out").read_text(errors="replace").split())
            raise WorkloadError(f"the replay's client failed (sysbench exit {code}): "
                                f"{said[-_OUTPUT_SHOWN:] or 'no message'}")
        began = min(int(t["began"]) for t in threads)
        ended = max(int(t["ended"]) for t in threads)
        self.seconds = (ended - began) / 1e9
        for t in threads:
            self.databases.update(t["use"])
            for (kind, error), n in t["error"].items():
                if kind == _CLOCK_KIND:
                    self.clock_errors[error] = self.clock_errors.get(error, 0) + n
        lates = [np.fromfile(path, dtype="<f8") for path in self.out.glob("late-*.bin")]
        self.late = np.concatenate(lates) if lates else np.empty(0)
        self.classes = self._classes(threads)

    def shut_down(self) -> None:
        """The client stopped, whatever happened (a statement in progress is killed on the
        server), and its folder removed."""
        process = self.process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(process.pid, 0)
            process.returncode = -signal.SIGKILL
            self._kill_sessions()
        shutil.rmtree(self.out, ignore_errors=True)

    def _kill_sessions(self) -> None:
        """The replay's connections the server still runs statements for, killed, and gone
        from its process list: a killed connection lingers until its thread notices, and one
        the client was opening when it died shows up only once the server has its socket."""
        with contextlib.suppress(pymysql.MySQLError):
            conn = self.server.connect(connect_timeout=5)
            try:
                deadline = time.monotonic() + 10
                with conn.cursor() as cur:
                    while True:
                        cur.execute("SELECT ID FROM information_schema.PROCESSLIST "
                                    "WHERE USER = %s", (DATA_USER,))
                        threads = [thread for (thread,) in cur.fetchall()]
                        if not threads or time.monotonic() > deadline:
                            return
                        for thread in threads:
                            with contextlib.suppress(pymysql.MySQLError):
                                cur.execute(f"KILL CONNECTION {int(thread)}")
                        time.sleep(0.05)
            finally:
                conn.close()

    def _classes(self, threads: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Per class id, across the threads: count, total seconds, p50/p95/p99, rows, errors
        by code and the rows' checksum; executions run as text, and prepared again. USE and SET
        timestamp records are left out."""
        times = np.concatenate([np.fromfile(path, dtype=_TIME)
                                for path in self.out.glob("times-*.bin")] or [np.empty(0, _TIME)])
        times = times[times["kind"] >= 0]
        order = np.argsort(times["kind"], kind="stable")
        kinds, starts = np.unique(times["kind"][order], return_index=True)
        seconds = np.split(times["seconds"][order].astype("f8"), starts[1:]) if kinds.size \
            else []
        timed = {int(kind): part for kind, part in zip(kinds, seconds, strict=True)}
        figures: defaultdict[int, dict[str, Any]] = defaultdict(
            lambda: {"rows": 0, "checksum": 0, "unsent": 0, "errors": {}})
        as_text: dict[int, int] = {}
        reprepared: dict[int, int] = {}
        for thread in threads:
            for kind, (rows, checksum, unsent) in thread["class"].items():
                into = figures[kind]
                into["rows"] += rows
                into["checksum"] = (into["checksum"] + checksum) % _CHECKSUM_MOD
                into["unsent"] += unsent
            for kind, n in thread["astext"].items():
                as_text[kind] = as_text.get(kind, 0) + n
            for kind, n in thread["reprepared"].items():
                reprepared[kind] = reprepared.get(kind, 0) + n
            for (kind, code), n in thread["error"].items():
                errors = figures[kind]["errors"]
                errors[code] = errors.get(code, 0) + n
        out: dict[str, dict[str, Any]] = {}
        for kind in sorted(k for k in set(figures) | set(timed) if k >= 0):
            part = timed.get(kind, np.empty(0))
            found = figures[kind]
            p50, p95, p99 = (float(v) for v in np.quantile(part, [0.5, 0.95, 0.99])) \
                if part.size else (0.0, 0.0, 0.0)
            out[self.plan.classes[kind].id] = {
                "n": int(part.size) + found["unsent"],
                "seconds": round(float(part.sum()), 6),
                "p50": round(p50, 7), "p95": round(p95, 7), "p99": round(p99, 7),
                "rows": found["rows"], "errors": found["errors"],
                "checksum": f"{found['checksum']:016x}",
                **({"as_text": as_text[kind]} if as_text.get(kind) else {}),
                **({"reprepared": reprepared[kind]} if reprepared.get(kind) else {}),
            }
        return out


@contextlib.contextmanager
def _pidfd(pid: int) -> Iterator[int]:
    handle = os.pidfd_open(pid)
    try:
        yield handle
    finally:
        os.close(handle)


def _thread_figures(path: Path) -> dict[str, Any]:
    """A client thread's summary (replay.lua's thread-N.txt)."""
    found: dict[str, Any] = {"class": {}, "error": {}, "use": {}, "astext": {}, "reprepared": {}}
    for line in path.read_text(errors="replace").splitlines():
        word, _, rest = line.partition(" ")
        if word in ("began", "ended"):
            found[word] = int(rest)
        elif word == "class":
            kind, rows, checksum, unsent = (int(v) for v in rest.split())
            found["class"][kind] = (rows, checksum, unsent)
        elif word == "error":
            kind, code, n = (int(v) for v in rest.split())
            found["error"][kind, str(code)] = n
        elif word in ("astext", "reprepared"):
            kind, n = (int(v) for v in rest.split())
            found[word][kind] = n
        elif word == "use":
            error, name = rest.split()
            found["use"][bytes.fromhex(name).decode("utf-8", "replace")] = error
        elif word == "fail":
            found["fail"] = rest
        elif word == "packet":
            kind, length = (int(v) for v in rest.split())
            found["packet"] = (kind, length)
    return found
