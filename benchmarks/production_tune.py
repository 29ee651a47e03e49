"""Does knoblab's answer for production make production faster? The README's four steps on a
server whose configuration is not the default, then its recommendation measured on that
server's own load, before against after.

    .venv/bin/python benchmarks/production_tune.py --pool 32M --tables 4 --table-size 100000 \
        --threads 4 --capture 20 --budget 20m --seconds 20 --rounds 5

1. "Production": a sandbox started with innodb_buffer_pool_size = POOL (its data is larger),
   holding sysbench's tables, running sysbench oltp_read_write on THREADS connections opened
   before the capture (a pool; the text protocol, as most drivers send statements; with
   --prepared, server-side prepared statements, captured with --reconnect idle), its
   ids drawn as RAND_TYPE says (sysbench's own default, "special": a hot 1% of rows).
2. `knoblab capture production.toml --for CAPTURE --data all`: the statements, the data and a
   spec whose [server.config] is production's configuration.
3. `knoblab tune cap/spec.toml --budget BUDGET` (knobs = "auto", as the capture wrote it).
4. The recommendation (recommended.cnf) against production's configuration on production's
   own load: knoblab runs sysbench (the same test, tables, threads and ids, SECONDS a run) on
   servers configured as production, with and without the recommended settings ([[step]]),
   ROUNDS server starts each, alternating.
Printed: what the capture held, the recommendation, and the before/after table with the
step's ratio and its interval. Everything runs in a temporary KNOBLAB_HOME and store (--keep
keeps the folder).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

from knoblab.server.binary import find_binary
from knoblab.server.sandbox import Sandbox, base_template

POOLED = Path(__file__).resolve().parent / "pooled.lua"  # oltp_read_write, as a pool runs it

PRODUCTION = """\
name = "production"
[server]
kind = "external"
socket = "{socket}"
user = "root"
"""

CHECK = """\
name = "production-before-after"
[server.config]
{production}
[workload]
kind = "sysbench"
test = "oltp_read_write"
threads = {threads}
tables = {tables}
table_size = {table_size}
rand_type = "{rand_type}"
duration = {seconds}
repetitions = {rounds}
options = {options}

[[step]]
{recommended}
"""


def sysbench(socket: str, args: argparse.Namespace, command: str,
             seconds: int = 0) -> list[str]:
    # --prepared: server-side prepared statements (sysbench's default), each connection
    # replaced by a new one when the server ends it, as a pool does (pooled.lua)
    prepared = getattr(args, "prepared", False)
    return ["sysbench", str(POOLED) if prepared else "oltp_read_write",
            f"--threads={args.threads}", f"--time={seconds}",
            f"--db-ps-mode={'auto' if prepared else 'disable'}",
            f"--rand-type={getattr(args, 'rand_type', 'special')}",
            f"--tables={args.tables}",
            f"--table-size={args.table_size}", f"--mysql-socket={socket}",
            "--mysql-user=root", "--mysql-db=sbtest", "--db-driver=mysql", command]


def knoblab(folder: Path, env: dict[str, str], *args: str) -> None:
    began = time.monotonic()
    subprocess.run([sys.executable, "-m", "knoblab.cli", "--store",
                    f"sqlite:///{folder / 'store.sqlite'}", *args], env=env, check=True)
    print(f"[knoblab {args[0]}: {time.monotonic() - began:,.0f} s]", flush=True)


@contextlib.contextmanager
def production(folder: Path, home: Path, args: argparse.Namespace
               ) -> Iterator[tuple[str, Path]]:
    """"Production" while the block runs: a sandbox with innodb_buffer_pool_size = POOL
    holding sysbench's tables, and folder/production.toml naming it as a running server
    (its socket, and that spec)."""
    binary = find_binary()
    settings = {"innodb_buffer_pool_size": args.pool}
    if getattr(args, "performance_schema", False):
        settings["performance_schema"] = "ON"
    with Sandbox(binary, base_template(binary, home) / "data", settings, home=home) as server:
        socket = str(server.socket)
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE sbtest")
        subprocess.run(sysbench(socket, args, "prepare"), capture_output=True, check=True)
        spec = folder / "production.toml"
        spec.write_text(PRODUCTION.format(socket=socket))
        yield socket, spec


def capture(folder: Path, home: Path, args: argparse.Namespace, env: dict[str, str]) -> None:
    with production(folder, home, args) as (socket, spec):
        # at full speed, or at --rate transactions a second where the caller has one
        rate = [f"--rate={args.rate}"] if getattr(args, "rate", None) else []
        load = subprocess.Popen(sysbench(socket, args, "run", args.capture + 900) + rate,
                                stdout=subprocess.DEVNULL)
        try:
            time.sleep(5)  # the pool open, the load running
            reconnect = ["--reconnect", "idle"] if getattr(args, "prepared", False) else []
            knoblab(folder, env, "capture", str(spec), "--for", f"{args.capture}s", "--out",
                    str(folder / "cap"), "--data", "all", *reconnect)
        finally:
            load.kill()
            load.wait()


def recommended(path: Path) -> dict[str, str]:
    """The settings of a recommended.cnf ([mysqld]: name = value lines)."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line and not line.startswith("["):
            name, value = (part.strip() for part in line.split("=", 1))
            found[name.replace("-", "_")] = value
    return found


def toml_lines(settings: dict[str, str]) -> str:
    return "\n".join(f"{name} = {json.dumps(value)}" for name, value in settings.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", default="32M")
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--table-size", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--rand-type", default="special",
                        help="production's sysbench ids, and the check's (sysbench's own "
                             "default: a hot 1%% of rows)")
    parser.add_argument("--prepared", action="store_true",
                        help="production's pool prepares its statements on the server as it "
                             "opens (sysbench's default), before the window: captured with "
                             "--reconnect idle, checked with prepared statements")
    parser.add_argument("--rate", type=int,
                        help="production's transactions a second (an open loop; default: "
                             "as fast as it goes). --reconnect idle ends a connection once "
                             "it has slept 5 ms: a loop at full speed never does")
    parser.add_argument("--capture", type=int, default=20, help="seconds")
    parser.add_argument("--budget", default="20m")
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="keep the folder here")
    parser.add_argument("--capture-only", action="store_true",
                        help="stop after the capture (with --keep: tune it later, again)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="knoblab-production-") as temporary:
        folder = args.keep or Path(temporary)
        folder.mkdir(parents=True, exist_ok=True)
        home = folder / "home"
        home.mkdir(exist_ok=True)
        env = {**os.environ, "KNOBLAB_HOME": str(home)}
        env.pop("KNOBLAB_STORE", None)
        os.environ["KNOBLAB_HOME"] = str(home)
        if (folder / "cap" / "capture.json").exists():
            print(f"the capture in {folder / 'cap'} is tuned again")  # with --keep
        else:
            capture(folder, home, args, env)
        if args.capture_only:
            return
        for earlier in (folder / "study", folder / "check"):
            shutil.rmtree(earlier, ignore_errors=True)
        (folder / "store-tune.sqlite").unlink(missing_ok=True)  # a new study each time
        summary = json.loads((folder / "cap" / "capture.json").read_text())
        production = tomllib.loads((folder / "cap" / "spec.toml").read_text())["server"][
            "config"]
        knoblab(folder, env, "tune", str(folder / "cap" / "spec.toml"), "--budget",
                args.budget, "--out", str(folder / "study"))
        advice = recommended(folder / "study" / "recommended.cnf")
        print(f"capture: {summary['log']}")
        print(f"production's configuration: {production}")
        print(f"recommended: {advice or 'nothing (keep the current configuration)'}")
        if not advice:
            return
        check = folder / "check.toml"
        check.write_text(CHECK.format(**vars(args), production=toml_lines(production),
                                      recommended=toml_lines(advice),
                                      options="{}" if args.prepared
                                      else '{ db-ps-mode = "disable" }'))
        knoblab(folder, env, "run", str(check), "--out", str(folder / "check"), "--json",
                str(folder / "check.json"))
        result = json.loads((folder / "check.json").read_text())
        for point in result["points"]:
            low, high = point["ci95"]
            print(f"{point.get('label') or point['settings']}: {point['mean']:,.1f} tps "
                  f"[{low:,.1f}-{high:,.1f}] {point.get('verdict', '')}")
        print(result["conclusion"].get("text", ""))


if __name__ == "__main__":
    main()
