"""Does a replay of a captured load measure what the load itself measures? sysbench captured
as production would be — its connections opened before the window, its statements prepared —
replayed by knoblab, against sysbench measured by knoblab: throughput at each buffer pool size,
and the verdicts.

    .venv/bin/python benchmarks/replay_fidelity.py --test oltp_read_write --tables 4 \
        --table-size 100000 --threads 4 --seconds 20 --repetitions 3 --pools 16M 64M 256M

1. A sandbox ("production") gets sysbench's tables (prepare).
2. `knoblab capture` takes SECONDS of sysbench TEST on THREADS threads with its data (--data
   all), as a user would: with the text protocol (--db-ps-mode=disable), its connections
   opened before the window (a pool); with --prepared, its server-side prepared statements,
   its connections opened once the window is open (MariaDB logs a prepared statement's
   values only when the log was on as it was prepared); with --prepared --reconnect, its
   connections opened before the window, prepared there, and captured with `--reconnect
   idle` (benchmarks/pooled.lua: a connection the server ends is replaced by a new one, which
   prepares again).
3. knoblab runs sysbench itself (kind = "sysbench": the same test, threads, tables and
   duration) and the replay of the capture (kind = "replay" over the capture's dump, speed
   max) for each innodb_buffer_pool_size in POOLS, REPETITIONS server starts each.
Printed: per pool, sysbench's rate (knoblab's steady mean of transactions per second) and the
replay's (its COMMITs over its wall time; for a test without transactions, its statements),
their ratio (the goal: within ±20% at every pool) and each run's verdicts. Everything runs in
a temporary KNOBLAB_HOME and store.
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
test = "{test}"
options = {options}
threads = {threads}
tables = {tables}
table_size = {table_size}
duration = {seconds}
repetitions = {repetitions}
[sweep]
innodb_buffer_pool_size = {pools}
[statistics]
seed = 1
"""

REPLAY_SPEC = """\
name = "fidelity-replay"
[dataset]
dump = "cap/data.sql.zst"
[workload]
kind = "replay"
log = "cap/statements.log"
repetitions = {repetitions}
[sweep]
innodb_buffer_pool_size = {pools}
[statistics]
seed = 1
"""


PRODUCTION = """\
name = "production"
[server]
kind = "external"
socket = "{socket}"
user = "root"
"""


def sysbench(socket: str, args: argparse.Namespace, command: str,
             seconds: int = 0) -> list[str]:
    # --reconnect: each connection replaced by a new one when the server ends it, as a pool
    # does (pooled.lua, on args.test: KNOBLAB_POOLED_TEST, set by main)
    script = str(Path(__file__).resolve().parent / "pooled.lua") if args.reconnect \
        else args.test
    return ["sysbench", script, f"--threads={args.threads}", f"--time={seconds}",
            f"--db-ps-mode={'auto' if args.prepared else 'disable'}",
            "--rand-type=uniform",  # as knoblab runs sysbench (its rand_type default)
            f"--tables={args.tables}", f"--table-size={args.table_size}",
            f"--mysql-socket={socket}", "--mysql-user=root", "--mysql-db=sbtest",
            "--db-driver=mysql", command]


def capture(folder: Path, home: Path, args: argparse.Namespace, env: dict[str, str]) -> None:
    """folder/cap: `knoblab capture` of sysbench's load on a sandbox."""
    binary = find_binary()
    with Sandbox(binary, base_template(binary, home) / "data",
                 {"innodb_buffer_pool_size": "256M"}, home=home) as server:
        socket = str(server.socket)
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE sbtest")
        subprocess.run(sysbench(socket, args, "prepare"), capture_output=True, check=True)
        spec = folder / "production.toml"
        spec.write_text(PRODUCTION.format(socket=socket))
        command = [sys.executable, "-m", "knoblab.cli", "capture", str(spec), "--for",
                   f"{args.seconds}s", "--out", str(folder / "cap"), "--data", "all"]
        rate = [f"--rate={args.rate}"] if args.rate else []
        load = None if args.prepared and not args.reconnect else subprocess.Popen(
            sysbench(socket, args, "run", args.seconds + 600) + rate, stdout=subprocess.DEVNULL)
        try:
            if load is not None:
                time.sleep(3)  # its connections open: a pool
                reconnect = ["--reconnect", "idle"] if args.reconnect else []
                subprocess.run([*command, "--log", "general", *reconnect], env=env, check=True)
                return
            window = subprocess.Popen([*command, "--log", "general"], env=env)
            while window.poll() is None and not _logging(server):
                time.sleep(0.05)
            load = subprocess.Popen(sysbench(socket, args, "run", args.seconds + 600),
                                    stdout=subprocess.DEVNULL)
            if window.wait() != 0:
                raise SystemExit("the capture failed")
        finally:
            if load is not None:
                load.kill()
                load.wait()


def _logging(server: Sandbox) -> bool:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@general_log")
        (row,) = cur.fetchall()
        return bool(int(row[0]))


def knoblab(folder: Path, spec: str, name: str, env: dict[str, str]) -> dict:
    path = folder / f"{name}.toml"
    path.write_text(spec)
    result = folder / f"{name}.json"
    subprocess.run([sys.executable, "-m", "knoblab.cli", "--store",
                    f"sqlite:///{folder / 'store.sqlite'}", "run", str(path), "--out",
                    str(folder / f"out-{name}"), "--json", str(result)], env=env, check=True)
    return json.loads(result.read_text())


def replay_tps(folder: Path, result: dict) -> dict[str, list[float]]:
    """Per pool, each measurement's COMMITs (or, without transactions, statements) per
    second of wall time."""
    commit = next((c["id"] for c in result["workload"]["classes"]
                   if c["fingerprint"] == "commit"), None)
    run_id = result["run_id"]
    found: dict[str, list[float]] = {}
    with sqlite3.connect(folder / "store.sqlite") as db:
        rows = db.execute("SELECT p.requested, t.details FROM trials t JOIN points p ON "
                          "p.run_id = t.run_id AND p.idx = t.point_idx WHERE t.run_id = ? "
                          "AND t.status = 'done'", (run_id,)).fetchall()
    for settings, details in rows:
        pool = json.loads(settings)["innodb_buffer_pool_size"]
        figures = json.loads(details)
        done = figures["classes"][commit]["n"] if commit else figures["statements"]
        found.setdefault(pool, []).append(done / figures["wall_seconds"])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--test", default="oltp_read_write",
                        choices=["oltp_read_write", "oltp_point_select"])
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--table-size", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--pools", nargs="+", default=["16M", "64M", "256M"])
    parser.add_argument("--prepared", action="store_true",
                        help="server-side prepared statements (the pool opens in the window)")
    parser.add_argument("--reconnect", action="store_true",
                        help="with --prepared: the pool opens before the window, and the "
                             "capture reconnects it (--reconnect idle)")
    parser.add_argument("--rate", type=int,
                        help="the captured load's transactions a second (an open loop; "
                             "default: as fast as it goes); --reconnect idle ends a "
                             "connection once it has slept 5 ms, which a loop at full speed "
                             "never does")
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
        os.environ["KNOBLAB_POOLED_TEST"] = env["KNOBLAB_POOLED_TEST"] = args.test
        capture(folder, home, args, env)
        log = json.loads((folder / "cap" / "capture.json").read_text())["log"]
        pools = json.dumps(args.pools)
        options = "{}" if args.prepared else '{ db-ps-mode = "disable" }'
        measured = knoblab(folder, SYSBENCH_SPEC.format(**{**vars(args), "pools": pools,
                                                           "options": options}),
                           "sysbench", env)
        replayed = knoblab(folder, REPLAY_SPEC.format(pools=pools,
                                                      repetitions=args.repetitions),
                           "replay", env)
        per_pool = replay_tps(folder, replayed)
    print(f"capture: {log}")
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
