"""The same study on a small machine and on this one: [machine] against no limits.

    .venv/bin/python benchmarks/machine_shape.py scan --rows 22000000 --repetitions 5
    .venv/bin/python benchmarks/machine_shape.py buffer-pool --table-size 250000 --repetitions 3

scan: the first article's I/O-bound half — read_buffer_size over a cold full scan of a MyISAM
table of about 1 GB (22M rows), in a 256 MB box reading at 100 MB/s, then without limits.
buffer-pool: innodb_buffer_pool_size 64M against 512M under sysbench oltp_read_only (4 tables,
4 threads, 30 s a run), in a 1 GB box, then without limits.

Each study runs `knoblab run` twice with one KNOBLAB_HOME (the data is built once) and its own
store, and prints per point: median (or mean tps) with its 95% interval, the verdict, the
regime, what the server read from the disk per run, the machine's iowait, and the counters
knoblab found to explain the result.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SCAN = """\
name = "scan-{label}"
{machine}
[server.config]
key_buffer_size = "8M"
aria_pagecache_buffer_size = "8M"
innodb_buffer_pool_size = "32M"
[dataset]
rows = {rows}
engine = "MyISAM"
[workload]
sql = "SELECT COUNT(*) FROM dt2 WHERE slack LIKE 'a%'"
cache = "cold"
repetitions = {repetitions}
[sweep]
read_buffer_size = ["8200", "128K", "1M", "8M"]
[statistics]
seed = 1
"""
SCAN_BOX = '[machine]\nmemory = "256M"\ndisk_read = "100MB/s"'

BUFFER_POOL = """\
name = "buffer-pool-{label}"
{machine}
[server.config]
key_buffer_size = "8M"
aria_pagecache_buffer_size = "8M"
[workload]
kind = "sysbench"
test = "oltp_read_only"
threads = 4
tables = 4
table_size = {table_size}
duration = 30
repetitions = {repetitions}
[sweep]
innodb_buffer_pool_size = ["64M", "512M"]
[statistics]
seed = 1
"""
BUFFER_POOL_BOX = '[machine]\nmemory = "1G"'


def run(folder: Path, home: Path, name: str, text: str) -> dict:
    spec = folder / f"{name}.toml"
    spec.write_text(text)
    result = folder / f"{name}.json"
    env = {**os.environ, "KNOBLAB_HOME": str(home)}
    env.pop("KNOBLAB_STORE", None)
    subprocess.run([sys.executable, "-m", "knoblab.cli", "--store",
                    f"sqlite:///{folder / 'store.sqlite'}", "run", str(spec), "--json",
                    str(result), "--out", str(folder / f"out-{name}")], env=env, check=True)
    return json.loads(result.read_text())


def show(name: str, result: dict) -> None:
    print(f"\n{name}: run {result['run_id']}, "
          f"{result['reproduce']['machine'].get('shape') or 'no limits'}")
    series = result["objective"]["metric"] == "tps"
    for point in result["points"]:
        value = point.get("mean") if series else point.get("median")
        ci = point.get("ci95") or [None, None]
        shown = ", ".join(f"{k}={v}" for k, v in point["settings"].items())
        read = point.get("read_mb")
        iowait = point.get("iowait_share")
        print(f"  {shown:<32} {value:>10.3f} [{ci[0]:.3f}–{ci[1]:.3f}] {point['verdict']:<13} "
              f"{point.get('regime') or '—':<10} read "
              f"{'—' if read is None else f'{read:,.1f} MB'}, iowait "
              f"{'—' if iowait is None else f'{iowait:.0%}'}")
    print(f"  {result['conclusion'].get('text', '')}")
    for explanation in result.get("explained_by") or []:
        for counter in explanation["counters"][:3]:
            print(f"  counter: {counter['text']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", choices=["scan", "buffer-pool"])
    parser.add_argument("--rows", type=int, default=22_000_000)
    parser.add_argument("--table-size", type=int, default=250_000)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="keep the folder (store, reports) here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="knoblab-shape-") as temporary:
        folder = args.keep or Path(temporary)
        folder.mkdir(parents=True, exist_ok=True)
        home = folder / "home"
        home.mkdir(exist_ok=True)
        template, box = (SCAN, SCAN_BOX) if args.study == "scan" else (BUFFER_POOL,
                                                                        BUFFER_POOL_BOX)
        found = {}
        for label, machine in (("box", box), ("unlimited", "")):
            found[label] = run(folder, home, f"{args.study}-{label}", template.format(
                label=label, machine=machine, rows=args.rows, table_size=args.table_size,
                repetitions=args.repetitions))
        for label, result in found.items():
            show(f"{args.study}, {label}", result)


if __name__ == "__main__":
    main()
