"""Times one SQL statement per measurement, on a fresh connection, warm or cold.

cold: before the timed run the table is closed (FLUSH TABLES), its files are synced and evicted
from the OS page cache with posix_fadvise(DONTNEED), and mincore() confirms they are gone.
warm: an untimed run first, so the timed one reads from memory.
The regime is judged from the server process's CPU time and the machine's iowait over the timed
run: a scan that keeps one core busy is CPU-bound; one that waits on reads is I/O-bound.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql

from knoblab.errors import UserError
from knoblab.observe import Observation
from knoblab.server.sandbox import Sandbox
from knoblab.workloads.dataset import DATABASE

CACHE_MODES = ("warm", "cold")
COLD_RESIDUE_LIMIT = 0.05  # a "cold" run with more than 5% of the table still cached is refused


class WorkloadError(UserError):
    """The statement itself failed (SQL error, timeout): the measurement is recorded as failed."""


@dataclass
class Measurement:
    seconds: float
    rows: int
    details: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class QueryWorkload:
    sql: str
    cache: str = "warm"
    timeout: float = 3600.0
    timed_runs: int = 1  # per server start; the measurement is their median

    def measure(self, server: Sandbox, table_files: list[Path],
                session_knobs: list[str]) -> Measurement:
        """The median run of `timed_runs` on this server start, with every run's time."""
        runs = [self.measure_once(server, table_files, session_knobs)
                for _ in range(self.timed_runs)]
        runs.sort(key=lambda m: m.seconds)
        median = runs[(len(runs) - 1) // 2]  # the lower median for even counts: a real run
        if len(runs) > 1:
            median.details["runs"] = [round(m.seconds, 6) for m in runs]
        return median

    def measure_once(self, server: Sandbox, table_files: list[Path],
                     session_knobs: list[str]) -> Measurement:
        if self.cache == "warm":
            self._run(server, timed=False)
            cached_before = cached_fraction(table_files)
        else:
            conn = server.connect()
            try:
                conn.query("FLUSH TABLES")
            finally:
                conn.close()
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
            "regime": regime(cpu_share, figures["cpu_iowait"]),
            "session": session,
            "os": figures,
            "status": seen["status"],
        })

    def _run(self, server: Sandbox, *, timed: bool, session_knobs: list[str] = ()
             ) -> tuple[float, int, dict[str, str], dict[str, Any]]:
        """Run the statement once; when timed, with the server's counters and the OS figures
        taken around the statement alone (not the connection or knoblab's own probes)."""
        conn = server.connect(DATABASE, read_timeout=self.timeout)
        too_long = WorkloadError(f"query exceeded the timeout of {self.timeout:g} s")
        try:
            with conn.cursor() as cur:
                session: dict[str, str] = {}
                for name in session_knobs:
                    # Proof the measured session runs with the setting, not just the global.
                    cur.execute(f"SELECT @@SESSION.{name}")
                    session[name] = str(cur.fetchone()[0])
                cur.execute("SELECT CONNECTION_ID()")
                connection_id = int(cur.fetchone()[0])
                observation = Observation(server) if timed else contextlib.nullcontext()
                began = time.perf_counter()
                try:
                    with observation:
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
        seen = observation.result if timed else {}
        return elapsed, rows, session if timed else {}, seen


def _kill_query(server: Sandbox, connection_id: int) -> None:
    """A running server keeps executing a statement whose client gave up: stop it."""
    try:
        conn = server.connect(connect_timeout=5)
        try:
            conn.query(f"KILL QUERY {int(connection_id)}")
        finally:
            conn.close()
    except (pymysql.MySQLError, UserError):
        pass  # already gone, or the server with it


def regime(cpu_share: float, iowait_share: float) -> str:
    """CPU-bound when the server kept a core busy for most of the run, else I/O-bound or mixed."""
    if cpu_share >= 0.75:
        return "CPU-bound"
    if iowait_share >= 0.10 or cpu_share < 0.4:
        return "I/O-bound"
    return "mixed"


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
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # dirty pages cannot be dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
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
