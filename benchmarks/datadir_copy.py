"""What a sandbox's copy of its data directory writes to the disk, and how long it takes
until it is on the disk: knoblab's copy (blocks of zeros allocated, not written) against a
plain copy of every byte (shutil.copyfile, as knoblab copied before), in turn.

    .venv/bin/python benchmarks/datadir_copy.py --times 7

The data directory is the base template (a fresh datadir: its 96 MB redo log is almost all
zeros). Printed: the median and range of the copy's time with `sync` (its writes on the
disk), and the bytes the copy made the kernel write (/proc/self/io write_bytes).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from knoblab.server.binary import find_binary
from knoblab.server.datadir import copy_datadir
from knoblab.server.sandbox import base_template


def _plain_copy(source: Path, target: Path) -> None:
    target.mkdir(parents=True)
    for folder, _, files in os.walk(source):
        here = target / Path(folder).relative_to(source)
        here.mkdir(exist_ok=True)
        for name in files:
            shutil.copyfile(Path(folder) / name, here / name)


def _written() -> int:
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("write_bytes"))


def _once(copy: Callable[[Path, Path], None], source: Path, target: Path) -> tuple[float, int]:
    shutil.rmtree(target, ignore_errors=True)
    os.sync()
    before, began = _written(), time.perf_counter()
    copy(source, target)
    os.sync()
    return time.perf_counter() - began, _written() - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--times", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        source = base_template(find_binary(), Path(folder) / "home") / "data"
        ways = {"knoblab's copy": copy_datadir, "every byte (shutil.copyfile)": _plain_copy}
        figures: dict[str, list[tuple[float, int]]] = {name: [] for name in ways}
        for _ in range(args.times):
            for name, copy in ways.items():
                figures[name].append(_once(copy, source, Path(folder) / "copy"))
        print("| copy | until on the disk: median | range | written |")
        print("|---|---|---|---|")
        for name, runs in figures.items():
            seconds = [s for s, _ in runs]
            print(f"| {name} | {statistics.median(seconds):.3f} s | {min(seconds):.3f}–"
                  f"{max(seconds):.3f} s | {statistics.median(b for _, b in runs) / 1e6:.1f} MB |")


if __name__ == "__main__":
    main()
