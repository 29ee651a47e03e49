"""What a capture window costs the server it runs on: sysbench's throughput while each of the
server's logs is on for a capture, against the same load with it off.

    .venv/bin/python benchmarks/capture_cost.py --phase 8 --rounds 3

One sandbox holding sysbench's table (100,000 rows, in memory), reached as a running server
over its socket. sysbench runs (oltp_read_write, THREADS threads, PHASE seconds each)
alternate, ROUNDS times: one with no log on, one inside a window of the general log to a FILE,
one with none, one inside a window of the slow log (long_query_time = 0) to a FILE, and so on
for the general log and the slow log to a TABLE (where the capture cannot write in the data
directory). Each run opens its connections inside
its window, so that the slow log follows them as it follows an application's new connections
(it does not follow those opened before its window: that is what the general log is for). Each
window is opened and closed by the capture's own machinery (knoblab.server.query_log); the copy
of the log a capture makes after its window is not part of it. Per run, the mean of its
seconds' tps (the first and last dropped); per window, its run against the mean of the runs
with no log on either side of it. Printed: per log, the median ratio and its range over the
rounds, and what the log wrote per second (FILE).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from knoblab.connection import Endpoint
from knoblab.server.binary import find_binary
from knoblab.server.external import ExternalServer
from knoblab.server.query_log import GENERAL, SLOW, QueryLog, Source
from knoblab.server.sandbox import Sandbox, base_template
from knoblab.store import RunInfo, Store
from knoblab.vocabulary import Experiment

SECOND = re.compile(r"\[ (\d+)s \] thds: \d+ tps: ([\d.]+)")
WINDOWS: tuple[tuple[str, Source, bool], ...] = (
    ("general log, FILE", GENERAL, True),
    ("slow log, FILE", SLOW, True),
    ("general log, TABLE", GENERAL, False),
    ("slow log, TABLE", SLOW, False),
)


def sysbench(socket: str, threads: int, command: str, seconds: int = 0) -> list[str]:
    return ["sysbench", "oltp_read_write", f"--threads={threads}", f"--time={seconds}",
            "--report-interval=1", "--tables=1", "--table-size=100000",
            f"--mysql-socket={socket}", "--mysql-user=root", "--mysql-db=sbtest",
            "--db-driver=mysql", command]


def load(socket: str, threads: int, seconds: int) -> float:
    """sysbench's mean tps over its seconds, the first and last dropped."""
    out = subprocess.run(sysbench(socket, threads, "run", seconds), capture_output=True,
                         text=True, check=True).stdout
    tps = [float(found.group(2)) for found in SECOND.finditer(out)]
    return statistics.fmean(tps[1:-1] or tps)


@contextlib.contextmanager
def window(server: ExternalServer, store: Store, source: Source,
           written: list[int]) -> Iterator[None]:
    """One capture window of `source`'s log, opened and closed as knoblab capture does; the
    bytes it wrote to its file, if any, appended to `written`."""
    run_id = store.create_run(name="cost", experiment=Experiment.CAPTURE, spec_source="",
                              server_binary="", server_version="", info=RunInfo(),
                              point_list=[])
    log = QueryLog.plan(server, server.catalog(), store, run_id, source)
    log.bind(run_id)
    own = server.connect()
    try:
        log.start(own)
        yield
    finally:
        own.close()
        log.put_back()
    if log.file is not None and log.file.exists():
        written.append(log.file.stat().st_size)
    log.clean_up()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", type=int, default=8, help="seconds per phase")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    off: list[float] = []
    ratios: dict[str, list[float]] = {name: [] for name, _, _ in WINDOWS}
    written: dict[str, list[int]] = {name: [] for name, _, _ in WINDOWS}
    with tempfile.TemporaryDirectory(prefix="knoblab-bench-") as home:
        os.environ["KNOBLAB_HOME"] = home
        binary = find_binary()
        with Sandbox(binary, base_template(binary, Path(home)) / "data",
                     {"innodb_buffer_pool_size": "256M"}, home=Path(home)) as sandbox:
            socket = str(sandbox.socket)
            with sandbox.connect() as conn, conn.cursor() as cur:
                cur.execute("CREATE DATABASE sbtest")
            subprocess.run(sysbench(socket, 1, "prepare"), check=True, capture_output=True)
            server = ExternalServer(Endpoint(socket=socket, user="root"))
            server.probe()
            datadir = server.datadir
            store = Store(f"sqlite:///{Path(home) / 'cost.sqlite'}")
            load(socket, args.threads, args.phase)  # warm: the table read into the pool
            before = load(socket, args.threads, args.phase)
            off.append(before)
            for _ in range(args.rounds):
                for name, source, to_file in WINDOWS:
                    # a table where the capture cannot write in the data directory
                    server._datadir = datadir if to_file else None
                    with window(server, store, source, written[name]):
                        on = load(socket, args.threads, args.phase)
                    after = load(socket, args.threads, args.phase)
                    off.append(after)
                    ratios[name].append(on / statistics.fmean([before, after]))
                    before = after
    print(f"{'log on':<20} {'tps against off':>22} {'log written':>14}")
    print(f"{'(off)':<20} {statistics.median(off):>13,.0f} tps [{min(off):,.0f}–"
          f"{max(off):,.0f}]")
    for name, _, _ in WINDOWS:
        found = ratios[name]
        rate = f"{statistics.median(written[name]) / args.phase / 1e6:.1f} MB/s" \
            if written[name] else "(a table)"
        print(f"{name:<20} {statistics.median(found):>9.2f} [{min(found):.2f}–"
              f"{max(found):.2f}] {rate:>14}")


if __name__ == "__main__":
    main()
