"""How to make one comparison of two points on one server start as sharp as this machine allows.

    .venv/bin/python benchmarks/within_start.py --runs 1600

One sandbox; a CPU-bound statement whose work is set exactly (`SELECT BENCHMARK(n, MD5(...))`,
n = 400,000 and 440,000, about 0.2 s) is timed `--runs` times, the two alternating. The times
less each statement's median are the machine's noise, in the order it came. Blocks of that
noise are then drawn (4,000 of them) and each way of measuring two points within a start is
applied to them, as a blocked round would:

- consecutive: point A's warm-up and timed runs, then B's (each point's measurement whole);
- interleaved: the warm-ups, then A and B alternating run by run (the parts of the points'
  measurements alternate);

with a point's value the median or the fastest of its timed runs. Reported for each: the
spread of log(B / A) over blocks (standard deviation, and 1.4826 x the median absolute
deviation, which ignores the rare large disturbances), i.e. the noise a paired comparison of
one round sees.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from knoblab.datasets.scan import ScanTable
from knoblab.server.binary import find_binary
from knoblab.server.sandbox import Sandbox, base_template, derived_template

WORK = (400_000, 440_000)


def record(runs: int) -> np.ndarray:
    with tempfile.TemporaryDirectory(prefix="knoblab-bench-") as home:
        os.environ["KNOBLAB_HOME"] = home
        binary = find_binary()
        base_template(binary, Path(home))
        data = ScanTable(rows=1000)
        template = derived_template(binary, data.key, data.build, Path(home))
        times = []
        with Sandbox(binary, template, {}) as server:
            conn = server.connect()
            with conn.cursor() as cur:
                for i in range(runs):
                    began = time.perf_counter()
                    cur.execute(f"SELECT BENCHMARK({WORK[i % 2]}, MD5('knoblab'))")
                    cur.fetchall()
                    times.append(time.perf_counter() - began)
    return np.asarray(times)


def lower_median(x: np.ndarray) -> float:
    return float(np.sort(x)[(len(x) - 1) // 2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1600)
    parser.add_argument("--timed", type=int, default=3, help="timed runs per point per round")
    parser.add_argument("--save", type=Path, help="keep the run times here (.npy), for "
                        "benchmarks/replay_designs.py")
    args = parser.parse_args()
    times = record(args.runs)
    if args.save:
        np.save(args.save, times)
    logs = np.log(times)
    noise = logs.copy()
    for first in (0, 1):
        noise[first::2] -= np.median(logs[first::2])
    a, b = times[0::2], times[1::2]
    slow = float(np.mean(np.log(a) > np.log(np.median(a)) + 0.1))
    print(f"{args.runs} runs; medians {np.median(a):.4f} s and {np.median(b):.4f} s "
          f"(ratio {np.median(b) / np.median(a):.4f}); runs over 10% slower than the median: "
          f"{slow:.0%}; lag-1 autocorrelation {np.corrcoef(noise[:-1], noise[1:])[0, 1]:+.2f}")
    k = args.timed
    block = 2 * (k + 1)
    consecutive = (np.arange(1, k + 1), np.arange(k + 2, 2 * k + 2))
    interleaved = (np.arange(2, block, 2), np.arange(3, block, 2))
    ways: dict[str, tuple[tuple[np.ndarray, np.ndarray], Callable[[np.ndarray], float]]] = {
        "consecutive, median of the timed runs": (consecutive, lower_median),
        "consecutive, fastest of the timed runs": (consecutive, lambda x: float(x.min())),
        "interleaved, median of the timed runs": (interleaved, lower_median),
        "interleaved, fastest of the timed runs": (interleaved, lambda x: float(x.min())),
    }
    rng = np.random.default_rng(1)
    starts = rng.integers(0, noise.size - block, 4000)
    print(f"\n| way ({k} timed runs per point) | SD of log(B/A) | robust SD |")
    print("|---|---|---|")
    for name, ((ia, ib), centre) in ways.items():
        d = np.array([centre(noise[s + ib]) - centre(noise[s + ia]) for s in starts])
        robust = 1.4826 * float(np.median(np.abs(d - np.median(d))))
        print(f"| {name} | {d.std():.4f} | {robust:.4f} |")


if __name__ == "__main__":
    main()
