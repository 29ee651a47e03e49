"""Error rates and power of looking after every round, by how the looks share alpha.

    .venv/bin/python benchmarks/sequential_error_rates.py --runs 40000

Simulated adaptive runs of two points with log-normal noise, looked at after every round from
3 to the ceiling with the Welch tests on log times and TOST within ±3% that
`repetitions = "auto"` uses (the vectorised version the tests check against the library's own):
the share that ever claims a difference between identical points (A/A), that ever claims
equivalence of points exactly 3% apart, and that detects a 5% difference at 5% noise, for the
Pocock-type spending (the default) and the O'Brien-Fleming type.
"""

from __future__ import annotations

import argparse

import numpy as np

from knoblab.stats import Levels
from tests.test_stats import _adaptive_runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40_000)
    args = parser.parse_args()
    print("| spending | ceiling | A/A: a difference claimed | equivalence claimed at 3% apart "
          "| 5% difference found (5% noise) |")
    print("|---|---|---|---|---|")
    for spending in ("pocock", "obf"):
        for ceiling in (20, 10):
            def levels(n: int, c: int = ceiling, s: str = spending) -> Levels:
                return Levels.sequential(0.05, n, 3, c, s)  # type: ignore[arg-type]

            a_a, _ = _adaptive_runs(np.random.default_rng(2026), args.runs, 1.0, 0.2, 3,
                                    ceiling, levels)
            _, same = _adaptive_runs(np.random.default_rng(7), args.runs, 1.03, 0.03, 3,
                                     ceiling, levels)
            found, _ = _adaptive_runs(np.random.default_rng(8), args.runs // 2, 1.05, 0.05, 3,
                                      ceiling, levels)
            print(f"| {spending} | {ceiling} | {a_a:.2%} | {same:.2%} | {found:.1%} |")


if __name__ == "__main__":
    main()
