"""How often knoblab decides correctly, and how fast, when the truth is known by construction.

    .venv/bin/python benchmarks/power.py --runs 30 --log /tmp/power.jsonl
    .venv/bin/python benchmarks/power.py --summarise /tmp/power.jsonl

The workload makes the server do a known amount of CPU work, set by a setting that has no
effect of its own: `SELECT BENCHMARK(@@global.wait_timeout, MD5(...))` evaluates MD5 as many
times as wait_timeout says. Two points, wait_timeout = W and W x (1 + effect), so the second
does 0%, 5% or 10% more work than the first; the machine's noise is whatever it is. Each case
is run end to end through `knoblab run` (a new store each time), with two designs:

- fixed: 5 server starts per point, 3 timed runs each (the design before adaptive rounds);
- auto: the default: blocked rounds (one start measures both points; wait_timeout needs no
  restart), repeated from 3 to 20 rounds until both points are decided.

Cases and designs are interleaved in a shuffled order within each iteration, so a drift of the
machine's speed reaches them alike. Every finished run is appended to the log as it ends (a
stopped benchmark resumes where it was). The summary gives, per case and design: the share of
runs that called the heavier point worse (power; for A/A, the false-positive rate), that called
the two equivalent, that stayed undecided, each with a 95% Wilson interval; the median wall
time of a run; and the effect as measured, pooled over all runs (the truth, established
independently of any one run).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CASES = {"A/A": 0.0, "5%": 0.05, "10%": 0.10}
DESIGNS = {
    "fixed": 'repetitions = 5\ndesign = "restarts"',
    "auto": 'repetitions = "auto"',
}
SPEC = """\
name = "power-{case_slug}-{design}"

[server]
binary = "mariadbd"

[dataset]
kind = "scan-table"
rows = 1000

[workload]
kind = "query"
sql = "SELECT BENCHMARK(@@global.wait_timeout, MD5('knoblab'))"
cache = "warm"
timed_runs = 3
{design_keys}

[sweep]
wait_timeout = [{light}, {heavy}]

[statistics]
min_effect = 0.03
alpha = 0.05
seed = {seed}
"""


def one_run(home: Path, case: str, design: str, work: int, seed: int) -> dict[str, Any]:
    heavy = round(work * (1 + CASES[case])) + (1 if CASES[case] == 0 else 0)
    with tempfile.TemporaryDirectory() as folder:
        spec = Path(folder) / "spec.toml"
        spec.write_text(SPEC.format(case_slug=case.replace("/", "").replace("%", "pct"),
                                    design=design, design_keys=DESIGNS[design], light=work,
                                    heavy=heavy, seed=seed))
        out = Path(folder) / "result.json"
        began = time.monotonic()
        done = subprocess.run(
            [str(Path(sys.executable).with_name("knoblab")), "--store", f"sqlite:///{folder}/store.sqlite",
             "run", str(spec), "--json", str(out), "--out", folder],
            env={**os.environ, "KNOBLAB_HOME": str(home)}, capture_output=True, text=True)
        seconds = time.monotonic() - began
        if done.returncode != 0:
            raise SystemExit(f"knoblab run failed ({done.returncode}): {done.stderr[-2000:]}")
        result = json.loads(out.read_text())
    by_value = {int(p["config"]["wait_timeout"]): p for p in result["points"]}
    light, heavier = by_value[work], by_value[heavy]
    return {"case": case, "design": design, "seed": seed, "seconds": seconds,
            "rounds": result["rounds"]["done"], "stopped": result["rounds"]["stopped"],
            "light": light["verdict"], "heavy": heavier["verdict"],
            "ratio": heavier["median"] / light["median"],
            "light_samples": light["samples"], "heavy_samples": heavier["samples"]}


def wilson(hits: int, n: int) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    z = 1.96
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def rate(hits: int, n: int) -> str:
    low, high = wilson(hits, n)
    return f"{hits}/{n} = {hits / n:.0%} ({low:.0%}–{high:.0%})"


def summarise(log: Path) -> None:
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    print("| case | design | runs | heavier called worse | equivalent | undecided | "
          "median time (range) | median rounds | effect measured (pooled) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for case in CASES:
        for design in DESIGNS:
            these = [r for r in rows if r["case"] == case and r["design"] == design]
            if not these:
                continue
            n = len(these)
            worse = sum(r["heavy"] == "worse" or r["light"] == "worse" for r in these)
            same = sum(r["heavy"] == "equivalent" for r in these)
            open_ = sum(r["heavy"] == "inconclusive" for r in these)
            times = sorted(r["seconds"] for r in these)
            # Ratio of geometric means over every measurement of every run of this case.
            light = [math.log(x) for r in these for x in r["light_samples"]]
            heavy = [math.log(x) for r in these for x in r["heavy_samples"]]
            effect = math.exp(statistics.fmean(heavy) - statistics.fmean(light)) - 1
            print(f"| {case} | {design} | {n} | {rate(worse, n)} | {rate(same, n)} | "
                  f"{rate(open_, n)} | {statistics.median(times):.0f} s "
                  f"({times[0]:.0f}–{times[-1]:.0f}) | "
                  f"{statistics.median(r['rounds'] for r in these):.0f} | {effect:+.1%} |")
    # How noisy the machine was: the spread of the blocked runs' paired log-ratios (each
    # round's two measurements share a start), robustly (1.4826 x MAD), median over the runs.
    spreads = []
    for r in rows:
        if r["design"] == "auto" and len(r["light_samples"]) == len(r["heavy_samples"]):
            d = [math.log(h / lo) for lo, h in zip(r["light_samples"], r["heavy_samples"],
                                                   strict=True)]
            centre = statistics.median(d)
            spreads.append(1.4826 * statistics.median(abs(x - centre) for x in d))
    if spreads:
        print("\nnoise: paired log-ratio within a start, robust SD "
              f"{statistics.median(spreads):.3f} (median over {len(spreads)} blocked runs; "
              f"{min(spreads):.3f}–{max(spreads):.3f})")
    wrong = [r for r in rows if r["case"] != "A/A" and r["light"] == "worse"]
    if wrong:
        print(f"\nruns that called the lighter point worse: {len(wrong)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="runs per case and design")
    parser.add_argument("--work", type=int, default=400_000,
                        help="MD5 evaluations of the lighter point (about 0.2 s here)")
    parser.add_argument("--log", type=Path, default=Path("power.jsonl"))
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--designs", default=",".join(DESIGNS))
    parser.add_argument("--summarise", type=Path, help="only print the summary of this log")
    args = parser.parse_args()
    if args.summarise:
        summarise(args.summarise)
        return
    cases = args.cases.split(",")
    designs = args.designs.split(",")
    done = ([json.loads(line) for line in args.log.read_text().splitlines() if line.strip()]
            if args.log.exists() else [])
    home = Path(tempfile.mkdtemp(prefix="knoblab-power-"))
    for iteration in range(args.runs):
        order = [(c, d) for c in cases for d in designs]
        random.Random(iteration).shuffle(order)
        for case, design in order:
            if any(r["case"] == case and r["design"] == design and r["seed"] == iteration + 1
                   for r in done):
                continue
            row = one_run(home, case, design, args.work, seed=iteration + 1)
            with args.log.open("a") as log:
                log.write(json.dumps(row) + "\n")
            print(f"{iteration + 1:3d} {case:4s} {design:5s} {row['seconds']:6.1f} s "
                  f"rounds {row['rounds']:2d}  {row['light']:>12s} {row['heavy']:>12s} "
                  f"{row['ratio'] - 1:+.1%}", flush=True)
    summarise(args.log)


if __name__ == "__main__":
    main()
