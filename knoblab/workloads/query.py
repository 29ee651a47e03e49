"""Times one SQL statement per measurement, on a fresh connection, warm or cold.

cold: before the timed run the table is closed (FLUSH TABLES), its files are synced and evicted
from the OS page cache with posix_fadvise(DONTNEED), and mincore() confirms they are gone.
warm: an untimed run first, so the timed one reads from memory.
The regime of each run is judged by the rule every timed kind shares (`knoblab.workloads.timed`).
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import re
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pymysql

from knoblab import datasets, section
from knoblab.admin import refuse_admin
from knoblab.capture.plan import changes_no_data
from knoblab.connection import Server, one
from knoblab.datasets import Dataset
from knoblab.datasets.scan import ScanTable, parameter_axis
from knoblab.errors import UserError
from knoblab.keys import Key, Keys
from knoblab.observe import Observation, SecondSampler, drop_from_page_cache
from knoblab.workloads.base import (
    Headline,
    Measured,
    Recorder,
    Rounds,
    WorkloadError,
)
from knoblab.workloads.timed import LEADING_COMMENTS, Measurement, Timed, regime

CACHE_MODES = ("warm", "cold")
# A statement that does not begin with one of these may change its data: a CALL, an EXECUTE
# IMMEDIATE or a DO can hold anything, so they count as writing (a fresh copy each time).
READS_DATA = re.compile(r"(SELECT|WITH|SHOW|EXPLAIN|DESC|DESCRIBE|VALUES|TABLE)\b",
                        re.IGNORECASE)
COLD_RESIDUE_LIMIT = 0.05  # a "cold" run with more than 5% of the table still cached is refused


@dataclass(frozen=True)
class QueryWorkload(Timed):
    """One SQL statement timed per measurement, over the built-in scan table or a dump."""

    kind: ClassVar[str] = "query"
    parameters: ClassVar[tuple[str, ...]] = ScanTable.parameters
    keys: ClassVar[Keys] = Keys(
        Key("kind", "One statement, timed: its wall time is the measurement.", "text",
            choices=("query",)),
        Key("sql", "The statement timed, on the data [dataset] builds (administrative "
            "statements are refused)."),
        Key("cache", "\"warm\": an untimed run first; \"cold\": the table's files evicted "
            "from the OS page cache before each measurement.", "text", "\"warm\"",
            choices=CACHE_MODES),
        Key("timed_runs", "Timed runs per measurement; the measurement is the fastest of them.",
            "a whole number", "1", 1, 1000),
        Key("timeout", "Seconds one run may take before it is stopped and the measurement "
            "failed.", "a number of seconds", "3600", 0.001, 7 * 86400),
    ) | Rounds.KEYS

    sql: str
    cache: str = "warm"
    timeout: float = 3600.0
    timed_runs: int = 1  # per server start; the measurement is the fastest
    data: Dataset | None = None  # [dataset]: the scan table (of each point's variant), a dump
    rounds: Rounds = Rounds()
    warnings: tuple[str, ...] = ()
    writes_data: bool = False

    # -- the spec -----------------------------------------------------------------------------

    @classmethod
    def from_spec(cls, workload: dict[str, Any], dataset: dict[str, Any],
                  sweep: dict[str, list[Any]], base_dir: Path | None) -> QueryWorkload:
        data = datasets.read(dataset, base_dir, sweep)
        swept = [name for name in cls.parameters if name in sweep and name not in data.parameters]
        if swept:
            raise UserError(f"[sweep] {swept[0]}: a parameter of the built-in scan table; "
                            "the data is the dump's")
        sql = section.text(workload, "sql", "workload", "")
        if not sql.strip():
            raise UserError("[workload] sql: give the statement to time, e.g. "
                            "sql = \"SELECT COUNT(*) FROM dt2 WHERE slack LIKE 'a%'\"")
        refuse_admin(sql, "[workload] sql")
        cache = section.text(workload, "cache", "workload", "warm")
        if cache not in CACHE_MODES:
            raise UserError(f"[workload] cache = {cache!r}: use \"warm\" or \"cold\"")
        timed_runs = section.number(workload, "timed_runs", "workload", 1, int, 1, 1000)
        # A statement that writes: on a running server its data is rebuilt before every
        # measurement; within one server start, later runs see what earlier ones left.
        writes = not READS_DATA.match(LEADING_COMMENTS.sub("", sql)) or \
            not changes_no_data(sql)
        notes: tuple[str, ...] = ()
        if writes and (cache == "warm" or timed_runs > 1):
            notes = ("the statement changes the data it runs on: within a server start each "
                     "run (the untimed warm-up run too) sees what the previous one left; use "
                     "cache = \"cold\" and timed_runs = 1, or a script workload",)
        return cls(
            sql=sql, cache=cache, warnings=notes, writes_data=writes,
            timeout=section.number(workload, "timeout", "workload", 3600.0, float, 0.001,
                                   7 * 86400.0),
            timed_runs=timed_runs,
            data=data,
            rounds=Rounds.from_spec(workload),
        )

    def parameter_axis(self, name: str, values: list[Any]) -> list[str]:
        return parameter_axis(name, values)

    def check_running_server(self, where: str, datadir: Path | None) -> None:
        self.dataset({}).check_running_server(where)  # said first: it cannot run there at all
        if self.cache == "cold" and datadir is None:
            raise UserError(f"cache = \"cold\" needs the server's files on this machine to "
                            f"evict them, and {where}'s data directory is not here; use "
                            "cache = \"warm\"")

    # -- the data -----------------------------------------------------------------------------

    def dataset(self, requested: Mapping[str, str]) -> Dataset:
        """The data a point runs on: its variant of the scan table (swept rows, engine or
        slack_type), or the dump."""
        assert self.data is not None, "a query workload read from a spec has its data"
        return self.data.varied(requested)

    def connections_for(self, requested: Mapping[str, str]) -> int:
        return 2  # the timed one, and knoblab's own for counters and settings

    @classmethod
    def headline(cls, described: Mapping[str, Any], swept: Collection[str]) -> Headline:
        sql = " ".join(str(described.get("sql") or "").split())
        cache = described.get("cache")
        return Headline(sql or cls.kind, f"`{sql}`" if sql else f"the {cls.kind} workload",
                        (f"{cache} cache",) if cache else ())

    def describe(self) -> dict[str, object]:
        return {"sql": self.sql, "cache": self.cache, "timed_runs": self.timed_runs,
                **self.dataset({}).pinned()}

    # -- the measurement ----------------------------------------------------------------------

    def measure(self, server: Server, requested: Mapping[str, str], session_knobs: list[str],
                recorder: Recorder) -> Measured:
        return self.join([self.measure_part(server, requested, session_knobs, recorder)
                          for _ in range(self.timed_runs)])

    @property
    def parts(self) -> int:
        return self.timed_runs

    def measure_part(self, server: Server, requested: Mapping[str, str],
                     session_knobs: list[str], recorder: Recorder) -> Measured:
        """One timed run (after its warm-up run, for a warm cache)."""
        # The OS figures of every second, warm-up included: long runs get their vmstat.
        with SecondSampler(server.pid) as sampler:
            files = self.dataset(requested).files(server.datadir, server.database) \
                if server.datadir else []
            run = self.measure_once(server, files, session_knobs)
        recorder.os_seconds(sampler.take())
        return Measured(run.seconds, {**run.details, "rows": run.rows})

    def warm_up(self, server: Server, requested: Mapping[str, str],
                session_knobs: list[str]) -> None:
        """Warm: nothing, each timed run follows an untimed one already. Cold: one untimed
        run, so that what eviction leaves alone (InnoDB's buffer pool, the table cache) is as
        full for the first point of a start as for the others."""
        if self.cache == "cold":
            self._run(server, timed=False)

    def join(self, parts: list[Measured]) -> Measured:
        """The fastest of the timed runs, with every run's time. On one server start the
        statement's work is the same every run; what differs is the machine's interference
        (another process, a slower moment of a shared CPU), which only ever adds time — on a
        cloud VM in about one run of five (docs/benchmarks.md). The fastest run is the one
        least disturbed; the median of three still takes a disturbed one when two are."""
        fastest = min(parts, key=lambda m: m.value)
        details = dict(fastest.details)
        if len(parts) > 1:
            details["runs"] = sorted(round(m.value, 6) for m in parts)
        return Measured(fastest.value, details)

    def measure_once(self, server: Server, table_files: list[Path],
                     session_knobs: list[str]) -> Measurement:
        if self.cache == "warm":
            self._run(server, timed=False)
            cached_before = cached_fraction(table_files)
            dropped = False
        else:
            conn = server.connect()
            try:
                conn.query("FLUSH TABLES")
            finally:
                conn.close()
            # A sandbox with a machine shape empties its own page cache (indexes, logs and
            # all); the table's files are evicted in any case, on any server here.
            dropped = server.drop_cache()
            cached_before = evict(table_files)
            if cached_before > COLD_RESIDUE_LIMIT:
                raise UserError(
                    f"cold cache: {cached_before:.0%} of the table is still in the page cache "
                    "after eviction; is another process holding it? Use cache = \"warm\" instead"
                )
        seconds, rows, session, seen = self._run(server, timed=True,
                                                 session_knobs=session_knobs)
        figures = seen["os"]
        # The server's own CPU time against the wall clock says whether the scan kept a core
        # busy; the machine's iowait says whether it waited for the disk instead.
        cpu_share = figures["server_cpu_seconds"] / seconds if seconds > 0 else 0.0
        return Measurement(seconds, rows, {
            "cpu_seconds": figures["server_cpu_seconds"],
            "cpu_share": round(cpu_share, 3),
            "iowait_share": figures["cpu_iowait"],
            "read_bytes": figures["server_read_bytes"],
            "write_bytes": figures["server_write_bytes"],
            "cached_before": round(cached_before, 4),
            "cache_emptied": dropped,  # the sandbox's whole page cache, through its group
            "regime": regime(cpu_share, figures["cpu_iowait"],
                             figures["server_read_bytes"] + figures["server_write_bytes"]),
            "session": session,
            "os": figures,
            "status": seen["status"],
            "levels": seen["levels"],
        })

    def _run(self, server: Server, *, timed: bool, session_knobs: Sequence[str] = ()
             ) -> tuple[float, int, dict[str, str], dict[str, Any]]:
        """Run the statement once; when timed, with the server's counters and the OS figures
        taken around the statement alone (not the connection or knoblab's own probes)."""
        # the data's database (knoblab's own there, for the scan table)
        conn = server.connect(self.dataset({}).database_on(server), read_timeout=self.timeout)
        too_long = WorkloadError(f"query exceeded the timeout of {self.timeout:g} s")
        try:
            with conn.cursor() as cur:
                session: dict[str, str] = {}
                for name in session_knobs:
                    # Proof the measured session runs with the setting, not just the global.
                    cur.execute(f"SELECT @@SESSION.{name}")
                    session[name] = str(one(cur)[0])
                cur.execute("SELECT CONNECTION_ID()")
                connection_id = int(one(cur)[0])
                observation = Observation(server) if timed else None
                began = time.perf_counter()
                try:
                    with observation or contextlib.nullcontext():
                        began = time.perf_counter()
                        cur.execute(self.sql)
                        rows = len(cur.fetchall())
                        elapsed = time.perf_counter() - began
                except pymysql.err.OperationalError as exc:
                    if exc.args and exc.args[0] in (2013, 2006) and \
                            time.perf_counter() - began >= self.timeout:
                        _kill_query(server, connection_id)
                        raise too_long from None
                    raise WorkloadError(f"query failed: {exc.args[-1]}") from None
                except pymysql.MySQLError as exc:
                    raise WorkloadError(f"query failed: {exc.args[-1]}") from None
        finally:
            conn.close()
        if elapsed > self.timeout:
            raise too_long  # the last bytes came just after the limit: still too long
        seen = observation.result if observation else {}
        return elapsed, rows, session if timed else {}, seen


def _kill_query(server: Server, connection_id: int) -> None:
    """A running server keeps executing a statement whose client gave up: stop it."""
    try:
        conn = server.connect(connect_timeout=5)
        try:
            conn.query(f"KILL QUERY {int(connection_id)}")
        finally:
            conn.close()
    except (pymysql.MySQLError, UserError):
        pass  # already gone, or the server with it


# --- page cache -----------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
_PAGE = mmap.PAGESIZE


def evict(files: list[Path]) -> float:
    """Drop the files' pages from the OS page cache; return the fraction still cached after."""
    drop_from_page_cache(files)
    return cached_fraction(files)


def cached_fraction(files: list[Path]) -> float:
    """Fraction of the files' pages resident in the page cache (mincore)."""
    resident = total = 0
    for path in files:
        size = path.stat().st_size
        if size == 0:
            continue
        pages = (size + _PAGE - 1) // _PAGE
        fd = os.open(path, os.O_RDONLY)
        try:
            addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                raise OSError(ctypes.get_errno(), f"mmap of {path} failed")
            try:
                vec = (ctypes.c_ubyte * pages)()
                if _libc.mincore(addr, size, vec) != 0:
                    raise OSError(ctypes.get_errno(), f"mincore of {path} failed")
                resident += sum(b & 1 for b in vec)
            finally:
                _libc.munmap(addr, size)
        finally:
            os.close(fd)
        total += pages
    return resident / total if total else 0.0
