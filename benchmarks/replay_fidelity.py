"""Does a replay of a captured load measure what the load itself measures? sysbench
oltp_read_write captured with the slow log, replayed by knoblab, against sysbench measured by
knoblab: throughput, and the buffer pool's verdict.

    .venv/bin/python benchmarks/replay_fidelity.py --tables 4 --table-size 100000 \
        --threads 4 --seconds 20 --repetitions 5 --pools 16M 256M

1. A sandbox gets sysbench's tables (prepare), which are dumped (mariadb-dump) as they are
   before the load: the replay's data.
2. sysbench oltp_read_write runs THREADS threads for SECONDS with the slow log at
   long_query_time = 0 (the capture), with the text protocol (--db-ps-mode=disable), as a
   captured log holds statements as text.
3. knoblab runs sysbench itself (kind = "sysbench", the same test, threads, duration and
   tables, text protocol) and the replay of the capture (kind = "replay", the dump, speed max)
   for each innodb_buffer_pool_size in POOLS, REPETITIONS server starts each.
Printed: per pool, sysbench's transactions per second (knoblab's steady mean), the replay's
(its COMMITs over its wall time), their ratio (the goal: within ±20%), and each run's
verdicts and the ratio between the pools with its interval. Everything runs in a temporary
KNOBLAB_HOME and store.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from knoblab.server.binary import find_binary
from knoblab.server.sandbox import Sandbox, base_template

SYSBENCH_SPEC = """\
name = "fidelity-sysbench"
[workload]
kind = "sysbench"
test = "oltp_read_write"
threads = {threads}
tables = {tables}
table_size = {table_size}
duration = {seconds}
repetitions = {repetitions}
options = {{ db-ps-mode = "disable" }}
[sweep]
innodb_buffer_pool_size = {pools}
[statistics]
seed = 1
"""

REPLAY_SPEC = """\
name = "fidelity-replay"
[dataset]
dump = "sbtest.sql"
[workload]
kind = "replay"
log = "capture.log"
repetitions = {repetitions}
[sweep]
innodb_buffer_pool_size = {pools}
[statistics]
seed = 1
"""


def sysbench(socket: str, args: argparse.Namespace, command: str) -> str:
    out = subprocess.run(
        ["sysbench", "oltp_read_write", f"--threads={args.threads}",
         f"--time={args.seconds}", f"--tables={args.tables}",
         f"--table-size={args.table_size}", "--db-ps-mode=disable",
         f"--mysql-socket={socket}", "--mysql-user=root", "--mysql-db=sbtest",
         "--db-driver=mysql", command], capture_output=True, text=True, check=True)
    return out.stdout


def capture(folder: Path, home: Path, args: argparse.Namespace) -> float:
    """Writes folder/sbtest.sql and folder/capture.log; sysbench's tps under the slow log."""
    binary = find_binary()
    settings = {"slow_query_log": "0", "long_query_time": "0",
                "slow_query_log_file": "capture.log", "innodb_buffer_pool_size": "256M"}
    with Sandbox(binary, base_template(binary, home) / "data", settings, home=home) as server:
        socket = str(server.socket)
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE sbtest")
        sysbench(socket, args, "prepare")
        with (folder / "sbtest.sql").open("w") as out:
            subprocess.run(["mariadb-dump", f"--socket={socket}", "--user=root",
                            "--single-transaction", "--databases", "sbtest"], stdout=out,
                           check=True)
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("SET GLOBAL slow_query_log = 1")
        said = sysbench(socket, args, "run")
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("SET GLOBAL slow_query_log = 0")
        time.sleep(0.5)
        assert server.datadir is not None
        (folder / "capture.log").write_bytes((server.datadir / "capture.log").read_bytes())
    line = next(line for line in said.splitlines() if "transactions:" in line)
    return float(line.split("(")[1].split()[0])


def knoblab(folder: Path, spec: str, name: str, env: dict[str, str]) -> dict:
    path = folder / f"{name}.toml"
    path.write_text(spec)
    result = folder / f"{name}.json"
    subprocess.run([sys.executable, "-m", "knoblab.cli", "--store",
                    f"sqlite:///{folder / 'store.sqlite'}", "run", str(path), "--out",
                    str(folder / f"out-{name}"), "--json", str(result)], env=env, check=True)
    return json.loads(result.read_text())


def replay_tps(folder: Path, result: dict) -> dict[str, list[float]]:
    """Per pool, each measurement's COMMITs per second of wall time."""
    commit = next(c["id"] for c in result["workload"]["classes"]
                  if c["fingerprint"] == "commit")
    run_id = result["run_id"]
    found: dict[str, list[float]] = {}
    with sqlite3.connect(folder / "store.sqlite") as db:
        rows = db.execute("SELECT p.requested, t.details FROM trials t JOIN points p ON "
                          "p.run_id = t.run_id AND p.idx = t.point_idx WHERE t.run_id = ? "
                          "AND t.status = 'done'", (run_id,)).fetchall()
    for settings, details in rows:
        pool = json.loads(settings)["innodb_buffer_pool_size"]
        figures = json.loads(details)
        commits = figures["classes"][commit]["n"]
        found.setdefault(pool, []).append(commits / figures["wall_seconds"])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--table-size", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--pools", nargs="+", default=["16M", "256M"])
    parser.add_argument("--keep", type=Path, help="keep the folder here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="knoblab-fidelity-") as temporary:
        folder = args.keep or Path(temporary)
        folder.mkdir(parents=True, exist_ok=True)
        home = folder / "home"
        home.mkdir(exist_ok=True)
        env = {**os.environ, "KNOBLAB_HOME": str(home)}
        env.pop("KNOBLAB_STORE", None)
        os.environ["KNOBLAB_HOME"] = str(home)
        captured = capture(folder, home, args)
        pools = json.dumps(args.pools)
        measured = knoblab(folder, SYSBENCH_SPEC.format(**{**vars(args), "pools": pools}),
                           "sysbench", env)
        replayed = knoblab(folder, REPLAY_SPEC.format(pools=pools,
                                                      repetitions=args.repetitions),
                           "replay", env)
        per_pool = replay_tps(folder, replayed)
    print(f"capture: sysbench {captured:,.1f} tps with the slow log on")
    print(f"{'pool':>6} {'sysbench tps':>14} {'replay tps':>12} {'replay/sysbench':>16}  "
          "verdicts (sysbench | replay)")
    for point, again in zip(measured["points"], replayed["points"], strict=True):
        pool = point["settings"]["innodb_buffer_pool_size"]
        tps = point["mean"]
        rates = per_pool.get(pool) or [0.0]
        mine = statistics.median(rates)
        print(f"{pool:>6} {tps:>14,.1f} {mine:>12,.1f} {mine / tps:>16.2f}  "
              f"{point['verdict']} | {again['verdict']}")
    for name, result in (("sysbench", measured), ("replay", replayed)):
        print(f"{name}: {result['conclusion'].get('text', '')}")


if __name__ == "__main__":
    main()
