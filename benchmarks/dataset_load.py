"""How fast the scan table is generated inside the server (target: >= 1M rows/s).

    .venv/bin/python benchmarks/dataset_load.py --rows 10000000

Builds the dataset template in a fresh, temporary knoblab home and reports the rows per second
of the generation itself (the INSERT ... SELECT statements) and of the whole template build
(copying the base datadir, starting and stopping the server included).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from knoblab.datasets.scan import ScanTable
from knoblab.server.binary import find_binary
from knoblab.server.sandbox import base_template, derived_template


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--engine", default="MyISAM")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="knoblab-bench-") as home:
        os.environ["KNOBLAB_HOME"] = home
        binary = find_binary()
        base_template(binary, Path(home))
        dataset = ScanTable(rows=args.rows, engine=args.engine)
        load_seconds = 0.0

        def build(server):
            nonlocal load_seconds
            began = time.perf_counter()
            dataset.build(server)
            load_seconds = time.perf_counter() - began

        began = time.perf_counter()
        data = derived_template(binary, dataset.key, build, Path(home))
        total = time.perf_counter() - began
        size = sum(p.stat().st_size for p in dataset.files(data))
    print(f"server: {binary.short_version}; {args.rows:,} rows, {args.engine}, "
          f"{size / 1e6:,.0f} MB")
    print(f"generation: {load_seconds:.2f} s = {args.rows / load_seconds / 1e6:.2f} M rows/s")
    print(f"template build in all: {total:.2f} s = {args.rows / total / 1e6:.2f} M rows/s")


if __name__ == "__main__":
    main()
