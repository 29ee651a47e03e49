"""Replay a recorded stretch of this machine's noise through the whole decision procedure.

    .venv/bin/python benchmarks/within_start.py --runs 1600 --save noise.npy
    .venv/bin/python benchmarks/replay_designs.py noise.npy --runs 200

The recording (benchmarks/within_start.py) is a sequence of run times on one sandbox; less
each statement's median, it is the machine's noise in the order it came. Two points, the
second 0%, 5% or 10% slower by construction, are measured on that noise as a blocked round
would (each round: a start, whose level is drawn with the spread measured between starts,
then a stretch of consecutive runs: a warm-up and 3 timed runs per point), and judged after
every round from 3 to 20 by stats.judge at the sequential levels, paired by round, stopping
when decided. Compared: the points' runs consecutive or interleaved, a point's value the
median or the fastest of its runs, and the looks' alpha spent Pocock- or O'Brien-Fleming-style.
Reported: how often the slower point is called worse (for 0%: falsely), how often the two are
called equivalent, and the mean rounds to a decision.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from pathlib import Path

import numpy as np

from knoblab import stats

START_SD = 0.025  # between starts' levels, docs/benchmarks.md (noise_structure.py)
TIMED = 3


@functools.cache
def levels(rounds: int, spending: str) -> stats.Levels:
    return stats.Levels.sequential(0.05, rounds, 3, 20, spending)  # type: ignore[arg-type]


def one_round(rng: np.random.Generator, noise: np.ndarray, effect: float, interleaved: bool,
              value: Callable[[np.ndarray], float]) -> tuple[float, float]:
    k = 2 * (TIMED + 1)
    start = int(rng.integers(0, noise.size - k))
    stretch = noise[start:start + k] + rng.normal(0.0, START_SD)
    if interleaved:  # both warm-ups, then the points alternate, in a random order each pass
        a, b = [], []
        for i in range(TIMED):
            first, second = stretch[2 + 2 * i], stretch[3 + 2 * i]
            if rng.random() < 0.5:
                first, second = second, first
            a.append(first)
            b.append(second)
        runs_a, runs_b = np.asarray(a), np.asarray(b)
    else:  # one point's warm-up and runs, then the other's, in a random order
        halves = stretch[1:TIMED + 1], stretch[TIMED + 2:]
        runs_a, runs_b = halves if rng.random() < 0.5 else halves[::-1]
    return float(np.exp(value(runs_a))), float(np.exp(np.log1p(effect) + value(runs_b)))


def adaptive_run(rng: np.random.Generator, noise: np.ndarray, effect: float,
                 interleaved: bool, value: Callable[[np.ndarray], float],
                 spending: str) -> tuple[dict[str, str], int]:
    points: dict[str, list[float]] = {"a": [], "b": []}
    blocks: dict[str, list[int]] = {"a": [], "b": []}
    for r in range(1, 21):
        a, b = one_round(rng, noise, effect, interleaved, value)
        for key, x in (("a", a), ("b", b)):
            points[key].append(x)
            blocks[key].append(r)
        if r < 3:
            continue
        judged = stats.judge(points, blocks=blocks, levels=levels(r, spending))  # type: ignore[arg-type]
        verdicts = {str(v.key): str(v.verdict) for v in judged.verdicts}
        if "inconclusive" not in (verdicts["a"], verdicts["b"]) or r == 20:
            return verdicts, r
    raise AssertionError("unreachable")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("noise", type=Path, help="run times saved by within_start.py --save")
    parser.add_argument("--runs", type=int, default=200, help="simulated runs per cell")
    args = parser.parse_args()
    times = np.load(args.noise)
    logs = np.log(times)
    noise = logs.copy()
    for first in (0, 1):
        noise[first::2] -= np.median(logs[first::2])
    ways: dict[str, Callable[[np.ndarray], float]] = {
        "median": lambda x: float(np.sort(x)[(len(x) - 1) // 2]),
        "fastest": lambda x: float(x.min())}
    print("| runs | value | spending | A/A: worse claimed | 5%: found (rounds) "
          "| 10%: found (rounds) |")
    print("|---|---|---|---|---|---|")
    for spending in ("obf", "pocock"):
        for interleaved in (False, True):
            for name, value in ways.items():
                cells = []
                for effect in (0.0, 0.05, 0.10):
                    rng = np.random.default_rng(1)
                    found = rounds = 0
                    for _ in range(args.runs):
                        verdicts, r = adaptive_run(rng, noise, effect, interleaved, value,
                                                   spending)
                        found += "worse" in verdicts.values()
                        rounds += r
                    cells.append(f"{found / args.runs:.0%}" + (
                        "" if effect == 0 else f" ({rounds / args.runs:.1f})"))
                print(f"| {'interleaved' if interleaved else 'consecutive'} | {name} "
                      f"| {spending} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
