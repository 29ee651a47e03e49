"""Is the replay measuring the server or its own client? Client CPU against server CPU per
statement, on a captured log of point selects replayed at 4 sessions, against sysbench itself.

    .venv/bin/python benchmarks/replay_client.py --seconds 10 --repeat 5

On one sandbox holding sysbench's table (100,000 rows): sysbench oltp_point_select runs
THREADS threads for SECONDS with the slow log at long_query_time = 0, which is the capture.
Then, with the slow log off, alternating REPEAT times:
- sysbench's run again (its own C client and LuaJIT: the reference for a lean client), with
  its server-side prepared statements and with the text protocol a replay uses (a captured
  log holds statements as text: the server parses each one again);
- knoblab's replay of the capture (its client: sysbench's LuaJIT threads playing the plan
  through libmariadb, `knoblab/workloads/replay.lua`; a session per captured connection);
- the same statements through PyMySQL (what the script workload's client costs), one thread
  per captured connection.
Per run: statements per second, the client's and the server's CPU microseconds per statement
(the process's own CPU times: /proc, psutil), and the client's CPU as a share of the server's.
Printed: the median and range over the repetitions, and the replay's client CPU per statement
against sysbench's text-protocol client's, run by run (the goal: at most 1.2).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pymysql

from knoblab.datasets.dump import DATA_HOST, DATA_USER
from knoblab.server.binary import find_binary
from knoblab.server.sandbox import Sandbox, base_template
from knoblab.workloads.replay import ReplayWorkload


def sysbench(socket: str, threads: int, seconds: int, command: str = "run",
             prepared: bool = True) -> float:
    """Its statements per second (run), or nothing (prepare)."""
    out = subprocess.run(
        ["sysbench", "oltp_point_select", f"--threads={threads}", f"--time={seconds}",
         f"--db-ps-mode={'auto' if prepared else 'disable'}",
         "--tables=1", "--table-size=100000", f"--mysql-socket={socket}", "--mysql-user=root",
         "--mysql-db=sbtest", "--db-driver=mysql", command],
        capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        if "queries:" in line and "per sec" in line:
            return float(line.split("(")[1].split()[0])
    return 0.0


def cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def pymysql_replay(socket: str, workload: ReplayWorkload) -> tuple[int, float]:
    """The plan's statements, a thread per session, through PyMySQL: (statements, seconds)."""
    plan = workload.plan
    count = [0]

    def session(index: int) -> None:
        conn = pymysql.connect(unix_socket=socket, user="root", database="sbtest",
                               autocommit=True)
        with conn.cursor() as cur:
            for kind, _, text in plan.records(plan.session(index)):
                if kind >= 0:
                    cur.execute(text.decode())
                    cur.fetchall()
                    count[0] += 1
        conn.close()

    threads = [threading.Thread(target=session, args=(i,)) for i in range(plan.sessions)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return count[0], time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    figures: dict[str, list[tuple[float, float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="knoblab-bench-") as home:
        os.environ["KNOBLAB_HOME"] = home
        binary = find_binary()
        settings = {"slow_query_log": "0", "long_query_time": "0",
                    "slow_query_log_file": "capture.log", "innodb_buffer_pool_size": "256M"}
        with Sandbox(binary, base_template(binary, Path(home)) / "data", settings,
                     home=Path(home)) as server:
            socket = str(server.socket)
            with server.connect() as conn, conn.cursor() as cur:
                cur.execute("CREATE DATABASE sbtest")
            sysbench(socket, 1, 1, "prepare")
            with server.connect() as conn, conn.cursor() as cur:
                cur.execute("SET GLOBAL slow_query_log = 1")  # the capture: its run only
            captured_rate = sysbench(socket, args.threads, args.seconds)
            with server.connect() as conn, conn.cursor() as cur:
                cur.execute("SET GLOBAL slow_query_log = 0")
            assert server.datadir is not None
            log = Path(home) / "capture.log"
            log.write_bytes((server.datadir / "capture.log").read_bytes())
            # The replay connects as the data account, which a dump's load grants its data.
            with server.connect() as conn, conn.cursor() as cur:
                cur.execute("CREATE USER IF NOT EXISTS %s@%s", (DATA_USER, DATA_HOST))
                cur.execute("GRANT ALL PRIVILEGES ON sbtest.* TO %s@%s", (DATA_USER, DATA_HOST))
            workload = ReplayWorkload.from_spec(
                {"kind": "replay", "log": str(log), "sessions": args.threads}, {}, {}, None)
            # Each client's statements: sysbench's own count, the plan's for the others.
            mariadbd = psutil.Process(server.pid)
            me = psutil.Process()
            print(f"capture: {workload.plan.statements:,} statements in "
                  f"{workload.plan.sessions} sessions ({captured_rate:,.0f}/s under the "
                  "slow log)")
            for _ in range(args.repeat):
                for name in ("sysbench", "sysbench, text protocol", "knoblab replay",
                             "PyMySQL"):
                    server_before = cpu(mariadbd)
                    if name.startswith("sysbench"):
                        client_before = children_cpu()
                        began = time.perf_counter()
                        rate = sysbench(socket, args.threads, args.seconds,
                                        prepared=name == "sysbench")
                        wall = time.perf_counter() - began
                        statements = rate * args.seconds
                        client = children_cpu() - client_before
                    else:
                        client_before = cpu(me)
                        if name == "PyMySQL":
                            statements, wall = pymysql_replay(socket, workload)
                            client = cpu(me) - client_before
                        else:  # its client is a process of its own, which it measures
                            measured = workload.replay(server)
                            statements = measured.details["statements"]
                            wall = measured.details["wall_seconds"]
                            client = measured.details["client_cpu_seconds"]
                    used = cpu(mariadbd) - server_before
                    figures.setdefault(name, []).append(
                        (statements / wall, client / statements * 1e6,
                         used / statements * 1e6))
    print(f"{'client':<22} {'statements/s':>22} {'client µs/stmt':>18} "
          f"{'server µs/stmt':>18} {'client/server':>16}")
    for name, runs in figures.items():
        def cell(values: list[float], digits: int = 1) -> str:
            return (f"{statistics.median(values):,.{digits}f} "
                    f"[{min(values):,.{digits}f}–{max(values):,.{digits}f}]")
        rates, clients, servers = zip(*runs, strict=True)
        shares = [c / s for c, s in zip(clients, servers, strict=True)]
        print(f"{name:<22} {cell(list(rates), 0):>22} {cell(list(clients)):>18} "
              f"{cell(list(servers)):>18} {cell(shares, 2):>16}")
    ratios = [replay[1] / text[1] for replay, text in
              zip(figures["knoblab replay"], figures["sysbench, text protocol"], strict=True)]
    print(f"replay's client CPU per statement / sysbench text protocol's: "
          f"{statistics.median(ratios):.2f} [{min(ratios):.2f}–{max(ratios):.2f}]")


if __name__ == "__main__":
    main()
