"""What the run-to-run noise of this machine is made of, and what lowers it.

    .venv/bin/python benchmarks/noise_structure.py --rows 2000000 --runs 120

One sandbox server with the scan table; the read_buffer_size study's statement is timed
`--runs` times back to back (warm cache), each run preceded by a short fixed CPU probe in the
client (a pure-Python loop, the same work every time). Done twice: with the server and the
client free to run on any CPU, then with the server pinned to the last CPU and the client to
the first (sched_setaffinity; only on a machine with more than one CPU).

Reported for each:
- the spread of the query times (coefficient of variation, and the share of runs within 10%
  of the fastest, i.e. the "fast level");
- how alike neighbouring runs are (lag-1 and lag-5 autocorrelation of log times): pairing
  runs close in time only cancels noise that persists from one run to the next;
- the spread of the log-ratio of neighbouring runs (what a paired comparison of adjacent runs
  sees) against the spread of single runs (what an unpaired comparison sees), as a variance
  ratio: below 1, pairing in time lowers the noise;
- over `--starts` further server starts (15 runs each), the spread between the starts' levels
  against the spread within a start: what measuring every point on one start saves;
- the correlation of the CPU probe with the query time, and the spread of the query time
  divided by the probe: a probe that tracks the machine's speed levels would let them be
  recognised (or divided out).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from knoblab.datasets.scan import ScanTable
from knoblab.server.binary import find_binary
from knoblab.server.sandbox import Sandbox, base_template, derived_template

SQL = "SELECT COUNT(*) FROM dt2 WHERE slack LIKE 'a%'"


def probe() -> float:
    """A fixed amount of CPU work in this process: its time follows the machine's speed."""
    began = time.perf_counter()
    total = 0
    for i in range(300_000):
        total += i * i % 7
    return time.perf_counter() - began


def series(server: Sandbox, runs: int, client_cpu: int | None) -> tuple[np.ndarray, np.ndarray]:
    if client_cpu is not None:
        os.sched_setaffinity(0, {client_cpu})
    try:
        conn = server.connect("knoblab")
        with conn.cursor() as cur:
            cur.execute(SQL)  # warm the cache
            cur.fetchall()
            queries, probes = [], []
            for _ in range(runs):
                probes.append(probe())
                began = time.perf_counter()
                cur.execute(SQL)
                cur.fetchall()
                queries.append(time.perf_counter() - began)
        conn.close()
    finally:
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
    return np.asarray(queries), np.asarray(probes)


def autocorrelation(x: np.ndarray, lag: int) -> float:
    return float(np.corrcoef(x[:-lag], x[lag:])[0, 1])


def describe(label: str, queries: np.ndarray, probes: np.ndarray) -> None:
    logs = np.log(queries)
    fastest = queries.min()
    neighbours = np.diff(logs)  # log(run i+1 / run i): what pairing adjacent runs compares
    # Var(log a − log b) for independent runs is 2 Var(log x): the ratio below is 1 when
    # neighbours are as unlike as any two runs, and falls as neighbouring runs share a level.
    pairing = float(neighbours.var(ddof=1) / (2 * logs.var(ddof=1)))
    normalised = logs - np.log(probes)
    print(f"{label}: {queries.size} runs, median {np.median(queries):.3f} s, "
          f"CV {queries.std(ddof=1) / queries.mean():.1%}, "
          f"{np.mean(queries < fastest * 1.1):.0%} within 10% of the fastest")
    print(f"  autocorrelation of log time: lag 1 {autocorrelation(logs, 1):+.2f}, "
          f"lag 5 {autocorrelation(logs, 5):+.2f}")
    print(f"  variance of neighbour log-ratios / that of two independent runs: {pairing:.2f}")
    print(f"  probe: median {np.median(probes) * 1e3:.1f} ms, "
          f"CV {probes.std(ddof=1) / probes.mean():.1%}, correlation with the query "
          f"{np.corrcoef(np.log(probes), logs)[0, 1]:+.2f}; query/probe spread (SD of log) "
          f"{normalised.std(ddof=1):.3f} vs the query's own {logs.std(ddof=1):.3f}")


def starts(binary, template: Path, count: int, runs: int) -> None:
    """Server starts as separate samples: how much a start's level differs from another's,
    against the spread within one start (what a design measuring every point on one start
    leaves in its comparisons)."""
    medians, within = [], []
    for _ in range(count):
        with Sandbox(binary, template, {}) as server:
            queries, _ = series(server, runs, None)
        logs = np.log(queries)
        medians.append(float(np.median(logs)))
        within.append(float(logs.std(ddof=1)))
    between = float(np.std(medians, ddof=1))
    print(f"{count} starts × {runs} runs: SD of log time within a start {np.median(within):.3f} "
          f"(median over starts), between the starts' medians {between:.3f} "
          f"(start medians {np.exp(min(medians)):.3f}–{np.exp(max(medians)):.3f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=120)
    parser.add_argument("--starts", type=int, default=10, help="server starts compared")
    args = parser.parse_args()
    cpus = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="knoblab-bench-") as home:
        os.environ["KNOBLAB_HOME"] = home
        binary = find_binary()
        base_template(binary, Path(home))
        dataset = ScanTable(rows=args.rows)
        template = derived_template(binary, dataset.key, dataset.build, Path(home))
        print(f"server: {binary.short_version}; {cpus} CPUs; {args.rows:,} rows")
        with Sandbox(binary, template, {}) as server:
            describe("free", *series(server, args.runs, None))
            if cpus > 1 and server.pid is not None:
                os.sched_setaffinity(server.pid, {cpus - 1})
                for task in Path(f"/proc/{server.pid}/task").iterdir():
                    os.sched_setaffinity(int(task.name), {cpus - 1})
                describe(f"pinned (server on CPU {cpus - 1}, client on CPU 0)",
                         *series(server, args.runs, 0))
                describe("free again", *series(server, args.runs, None))
        starts(binary, template, args.starts, 15)


if __name__ == "__main__":
    main()
