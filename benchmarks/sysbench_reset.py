"""What it costs to give every sysbench trial fresh data: `prepare` once vs a reset per trial.

    .venv/bin/python benchmarks/sysbench_reset.py --tables 8 --table-size 500000 --starts 5

Prepares the sysbench tables once into a template datadir (timed), then times what each trial
pays instead of a new prepare: copying the template, starting the server, stopping it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from knoblab.server.binary import find_binary
from knoblab.server.sandbox import Sandbox, base_template, derived_template
from knoblab.workloads.sysbench import SysbenchWorkload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=8)
    parser.add_argument("--table-size", type=int, default=500_000)
    parser.add_argument("--starts", type=int, default=5)
    args = parser.parse_args()
    workload = SysbenchWorkload(tables=args.tables, table_size=args.table_size)
    with tempfile.TemporaryDirectory(prefix="knoblab-bench-") as home:
        os.environ["KNOBLAB_HOME"] = home
        binary = find_binary()
        base_template(binary, Path(home))
        began = time.perf_counter()
        template = derived_template(binary, f"sysbench-{workload.prepare_key()}",
                                    workload.prepare, Path(home))
        prepare_seconds = time.perf_counter() - began
        size = sum(p.stat().st_size for p in template.rglob("*") if p.is_file())
        resets, copies = [], []
        for _ in range(args.starts):
            began = time.perf_counter()
            server = Sandbox(binary, template, {})
            server.start()
            server.stop()
            resets.append(time.perf_counter() - began)
            copies.append(server.copy_seconds)
    print(f"server: {binary.short_version}; sysbench {args.tables} tables × "
          f"{args.table_size:,} rows; datadir {size / 1e9:.2f} GB")
    print(f"prepare (once, into the template): {prepare_seconds:.1f} s")
    print(f"reset per trial (copy + start + stop), {args.starts} starts: median "
          f"{statistics.median(resets):.2f} s ({min(resets):.2f}–{max(resets):.2f}); "
          f"of which copy {statistics.median(copies):.2f} s")


if __name__ == "__main__":
    main()
