"""Evidence around a measurement: the server's counters and the operating system's figures.

`Observation` reads SHOW GLOBAL STATUS and the OS figures (machine CPU shares, disk bytes, the
server process's CPU time and I/O) before and after a measurement; `SecondSampler` records the
OS figures every second of a long one. What the article read from vmstat and SHOW STATUS by hand.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil
import pymysql

from knoblab.connection import Server
from knoblab.evidence import kind_of, status_delta


def global_status(server: Server) -> dict[str, str]:
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS")
            return {name: str(value) for name, value in cur.fetchall()}
    finally:
        conn.close()


class OsCounters:
    """A snapshot of the machine's and the server process's cumulative OS figures."""

    def __init__(self, pid: int | None) -> None:
        self.when = time.monotonic()
        self.cpu = psutil.cpu_times()
        disk = psutil.disk_io_counters()
        self.disk_read = disk.read_bytes if disk else 0
        self.disk_write = disk.write_bytes if disk else 0
        self.server_cpu = self.server_read = self.server_write = 0.0
        if pid is not None:
            try:
                process = psutil.Process(pid)
                times, io = process.cpu_times(), process.io_counters()
                self.server_cpu = times.user + times.system
                self.server_read, self.server_write = io.read_bytes, io.write_bytes
            except psutil.Error:
                pass  # the server died; its share stays 0 and the trial fails elsewhere

    def since(self, earlier: OsCounters) -> dict[str, float]:
        """Figures over the interval from `earlier` to this snapshot (shares of all CPUs)."""
        total = sum(self.cpu) - sum(earlier.cpu)
        seconds = max(self.when - earlier.when, 1e-9)

        def share(field: str) -> float:
            if total <= 0:
                return 0.0
            return round((getattr(self.cpu, field) - getattr(earlier.cpu, field)) / total, 4)

        return {
            "seconds": round(seconds, 4),
            "cpu_user": share("user"), "cpu_system": share("system"),
            "cpu_iowait": share("iowait"), "cpu_idle": share("idle"),
            "disk_read_bytes": self.disk_read - earlier.disk_read,
            "disk_write_bytes": self.disk_write - earlier.disk_write,
            "server_cpu_seconds": round(self.server_cpu - earlier.server_cpu, 4),
            "server_cpu_share": round((self.server_cpu - earlier.server_cpu) / seconds, 4),
            "server_read_bytes": self.server_read - earlier.server_read,
            "server_write_bytes": self.server_write - earlier.server_write,
        }


class Observation:
    """Counters and OS figures over one measurement: `with Observation(server) as seen: ...`."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.result: dict[str, Any] = {}

    def __enter__(self) -> Observation:
        # Reading SHOW GLOBAL STATUS moves counters itself (a temporary table, a Com_show_status,
        # bytes sent): two reads in a row measure that cost, which is taken off the result.
        first = global_status(self.server)
        self._status = global_status(self.server)
        self._probe = status_delta(first, self._status)
        self._os = OsCounters(self.server.pid)
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is not None:
            return
        os_figures = OsCounters(self.server.pid).since(self._os)
        levels: dict[str, float] = {}
        try:
            after = global_status(self.server)
            status = status_delta(self._status, after)
            status = {name: value - self._probe.get(name, 0) for name, value in status.items()}
            # A level (pages free, checkpoint age) is kept as it stood at the end, not as a
            # delta: knoblab.evidence shows it so, never per unit of work.
            levels = {name: value for name, value in status_delta(
                {n: "0" for n in after}, after).items() if kind_of(name) == "level"}
        except pymysql.MySQLError:
            status = {}  # the server died during the measurement: the caller reports that
        self.result = {"status": status, "levels": levels, "os": os_figures}


class SecondSampler:
    """Samples the OS figures every second in a thread; `take()` hands over what it has.

    The samples are stored by the caller's thread (database connections stay in one thread).
    """

    def __init__(self, pid: int | None, interval: float = 1.0) -> None:
        self._pid, self._interval = pid, interval
        self._samples: deque[tuple[float, dict[str, float]]] = deque()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="knoblab-os-sampler",
                                        daemon=True)

    def __enter__(self) -> SecondSampler:
        self._began = self._last = OsCounters(self._pid)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        now = OsCounters(self._pid)  # the last, partial second: short runs get one sample too
        if now.when - self._last.when > 0.05:
            self._samples.append((round(now.when - self._began.when, 3), now.since(self._last)))

    def take(self) -> list[tuple[float, dict[str, float]]]:
        taken = []
        while self._samples:
            taken.append(self._samples.popleft())
        return taken

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            now = OsCounters(self._pid)
            self._samples.append((round(now.when - self._began.when, 3), now.since(self._last)))
            self._last = now


def drop_from_page_cache(files: Iterable[Path]) -> None:
    """The files written to disk and dropped from the OS page cache: whoever reads them next
    reads them from the disk (and its cache is charged to that reader)."""
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # dirty pages cannot be dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
