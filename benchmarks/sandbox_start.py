"""What one trial costs before the workload runs: datadir copy, server start, server stop.

    .venv/bin/python benchmarks/sandbox_start.py --rows 2000000 --starts 10

Each trial starts a server on a fresh copy of the template datadir, so these figures are the
fixed price of one repetition. Reported as median and range over `--starts` starts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from knoblab.datasets.scan import ScanTable
from knoblab.server.binary import find_binary
from knoblab.server.sandbox import Sandbox, base_template, derived_template


def measure(binary, template: Path, starts: int) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {"copy": [], "start": [], "stop": []}
    for _ in range(starts):
        server = Sandbox(binary, template, {})
        server.start()
        began = time.perf_counter()
        server.stop()
        figures["copy"].append(server.copy_seconds)
        figures["start"].append(server.start_seconds)
        figures["stop"].append(time.perf_counter() - began)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--starts", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="knoblab-bench-") as home:
        os.environ["KNOBLAB_HOME"] = home
        binary = find_binary()
        base = base_template(binary, Path(home)) / "data"
        dataset = ScanTable(rows=args.rows)
        with_data = derived_template(binary, dataset.key, dataset.build, Path(home))
        print(f"server: {binary.short_version}; {args.starts} starts each")
        for label, template in (("empty datadir", base), (f"{args.rows:,} rows", with_data)):
            size = sum(p.stat().st_size for p in template.rglob("*") if p.is_file())
            figures = measure(binary, template, args.starts)
            parts = [f"{name} {statistics.median(v):.3f} s ({min(v):.3f}–{max(v):.3f})"
                     for name, v in figures.items()]
            print(f"{label} ({size / 1e6:,.0f} MB): " + "; ".join(parts))


if __name__ == "__main__":
    main()
