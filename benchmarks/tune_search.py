"""knoblab tune against plain random search and the usual practice, on a space first measured
exhaustively, so that every configuration's true value is known.

    .venv/bin/python benchmarks/tune_search.py grid --space hard --rounds 10 \\
        --out docs/data/tune-grid.json
    .venv/bin/python benchmarks/tune_search.py compare docs/data/tune-grid.json --seeds 5 \\
        --trials 15 --log /tmp/tune-search.jsonl
    .venv/bin/python benchmarks/tune_search.py summarise docs/data/tune-grid.json \\
        /tmp/tune-search.jsonl
    cd benchmarks && ../.venv/bin/python tune_search.py samplers ../docs/data/tune-grid.json

The spaces: the query mix of examples/tune-query-mix.toml over three settings, three values each
(27 configurations; the server's defaults among them). "easy" holds join_cache_level, worth
+350% against a noise of 20%; "hard" leaves it at its default, so the effects are of the size
of the noise. "oltp" is the buffer pool of examples/tune-oltp.toml under sysbench
oltp_read_write (about 240 MB of data): innodb_buffer_pool_size and innodb_log_file_size, three
values each (9 configurations), throughput maximized.

grid: one `knoblab run` of the configurations, `--rounds` rounds, blocked (one server start
measures all of them; for oltp, whose load changes its data, a start and a fresh copy each).
A configuration's true gain over the defaults comes from a two-way fit of the log times (round
+ configuration), so each round's level is taken from all the configurations, not from the
defaults' single measurement.

compare: per seed, knoblab tune for real (the CLI, real servers, a study of its own) over the
same values ({ values = [...] }), `--trials` trials (and `--budget`, the study's). Every
finished seed is appended to the log.

summarise: beside each knoblab seed, two searches that score each configuration once, replayed
from the grid's own measurements (a once-scored trial is one recorded measurement of its
configuration, drawn at random, as a fresh single run would be, and costs what a grid
measurement cost): plain random search, and Optuna's TPE recommending the best number it saw
(the usual practice), each given the wall time knoblab took for that seed. (The logs of the
first two spaces hold these searches at a fixed number of trials; they are read as they are.)
Then per method, over seeds: trials (and minutes of measuring) until a trial lands within 5% of
the optimum, the true gain of what it recommends, whether that is within 5% of the optimum,
the gain it claims (and whether its 95% interval holds the true gain), and how often it
recommends a setting the grid cannot tell from its default (put back alone, the true gain
moves by less than the grid's standard error).

samplers: Optuna's samplers (search_truth.sampler's) scoring once from the grid's
measurements, the same seeds for each: the trials until one lands within 5% of the optimum.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "tune-query-mix.toml"
# Three values each, the server's default in the middle of each list.
SPACES: dict[str, dict[str, list[str]]] = {
    "easy": {
        "tmp_table_size": ["2M", "16M", "128M"],  # max_heap_table_size tied (the example's)
        "join_cache_level": ["1", "2", "6"],
        "join_buffer_size": ["128K", "256K", "4M"],
    },
    "hard": {  # join_cache_level at its default (2): block nested loop joins
        "tmp_table_size": ["6M", "16M", "64M"],
        "sort_buffer_size": ["256K", "2M", "16M"],
        "join_buffer_size": ["128K", "256K", "4M"],
    },
    "oltp": {  # examples/tune-oltp.toml's buffer pool and redo log, on 240 MB of data
        "innodb_buffer_pool_size": ["16M", "128M", "512M"],
        "innodb_log_file_size": ["16M", "96M", "512M"],
    },
}
DEFAULTS = {"tmp_table_size": "16M", "join_cache_level": "2", "join_buffer_size": "256K",
            "sort_buffer_size": "2M", "innodb_buffer_pool_size": "128M",
            "innodb_log_file_size": "96M"}
MAXIMIZED = {"oltp"}  # its trials' value is throughput; the others' a time
WITHIN = 0.05
# examples/tune-oltp.toml's load, made smaller in time: 10-s measurements after a 5-s warm-up.
OLTP = """name = "tune-oltp"

[server]
binary = "mariadbd"

[workload]
kind = "sysbench"
test = "oltp_read_write"
threads = 8
tables = 4
table_size = 250_000
rand_type = "pareto"
duration = 10
warmup = 5

"""


def _spec_text(tail: str, name: str, seed: int, space: str = "easy",
               workload: str = "") -> str:
    """The space's server and workload (`workload` lines added to it), its [tune] or [sweep]
    given by `tail`."""
    if space == "oltp":
        text = OLTP.replace("warmup = 5\n", "warmup = 5\n" + workload)
        text = text.replace('name = "tune-oltp"', f'name = "{name}"')
    else:  # the query mix's example, with its own [tune] replaced
        text = EXAMPLE.read_text()
        text = text[:text.index("[statistics]")]
        text = text.replace('name = "tune-query-mix"', f'name = "{name}"')
        text = text.replace("iterations = 1\n", "iterations = 1\n" + workload)
    return text + f"[statistics]\nmin_effect = 0.03\nseed = {seed}\n\n" + tail


def _knoblab(home: Path, store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KNOBLAB_HOME": str(home)}
    env.pop("KNOBLAB_STORE", None)
    return subprocess.run([sys.executable, "-m", "knoblab.cli", "--store", f"sqlite:///{store}",
                           *args], env=env, capture_output=True, text=True, check=False)


def _key(config: dict[str, str]) -> str:
    return json.dumps(dict(sorted(config.items())))


# --- grid -------------------------------------------------------------------------------------


def grid(space: str, rounds: int, out: Path, home: Path) -> None:
    from knoblab.store import Store

    sweep = "".join(f"{k} = {json.dumps(v)}\n" for k, v in SPACES[space].items())
    # one server start per round; a load that changes its data needs a fresh copy (and so a
    # start) per measurement
    design = "restarts" if space == "oltp" else "blocked"
    text = _spec_text(f"[sweep]\n{sweep}", "tune-grid", 1, space,
                      f'repetitions = {rounds}\ndesign = "{design}"\n')
    with tempfile.TemporaryDirectory() as scratch:
        spec, store_path = Path(scratch) / "grid.toml", Path(scratch) / "grid.sqlite"
        spec.write_text(text)
        began = time.monotonic()
        done = _knoblab(home, store_path, "run", str(spec), "--json",
                        str(Path(scratch) / "grid.json"), "--out", f"{scratch}/report")
        wall = time.monotonic() - began
        if done.returncode != 0:
            sys.exit(f"the grid run failed: {done.stderr.strip()}")
        run_id = json.loads((Path(scratch) / "grid.json").read_text())["run_id"]
        store = Store(f"sqlite:///{store_path}")
        points = store.points(run_id)
        values: dict[str, dict[int, float]] = {}
        for t in store.trials(run_id):
            if t.value is not None and t.status == "done":
                config = {k: points[t.point_idx][1][k] for k in SPACES[space]}
                values.setdefault(_key(config), {})[t.repetition] = t.value
    measured = sum(len(v) for v in values.values())
    data = {"space": space, "grid": SPACES[space], "rounds": rounds, "wall_seconds": round(wall, 1),
            "maximize": space in MAXIMIZED,
            "measurements": measured,
            "values": {k: [v.get(r) for r in range(rounds)] for k, v in values.items()}}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1))
    print(f"{len(values)} configurations × {rounds} rounds in {wall / 60:.1f} min -> {out}")


def truth(data: dict[str, Any]) -> tuple[dict[str, float], str, str, float]:
    """Each configuration's true gain over the defaults (+0.08: 8% faster), the defaults' key,
    the optimum's key, and the standard error of a difference of two log effects. Log time
    (or minus log throughput) = round level + configuration effect, fitted by alternating means
    (the grid is complete but for failed measurements)."""
    values = data["values"]
    base = _key(_defaults(data))
    sign = -1 if data.get("maximize") else 1
    logs = {(k, r): sign * math.log(v) for k, row in values.items() for r, v in enumerate(row)
            if v}
    effect = {k: 0.0 for k in values}
    level = {r: 0.0 for r in range(data["rounds"])}
    for _ in range(50):
        level = {r: statistics.fmean(x - effect[k] for (k, s), x in logs.items() if s == r)
                 for r in level}
        effect = {k: statistics.fmean(x - level[r] for (c, r), x in logs.items() if c == k)
                  for k in effect}
    gains = {k: math.expm1(effect[base] - e) for k, e in effect.items()}
    best = max(gains, key=lambda k: gains[k])
    residual = [x - level[r] - effect[k] for (k, r), x in logs.items()]
    free = len(residual) - len(effect) - len(level) + 1
    sd = math.sqrt(sum(e * e for e in residual) / free)
    return gains, base, best, sd * math.sqrt(2 / data["rounds"])


def _defaults(data: dict[str, Any]) -> dict[str, str]:
    from knoblab.units import parse_size

    return {k: str(parse_size(DEFAULTS[k])) for k in _space(data)}


def _space(data: dict[str, Any]) -> dict[str, list[str]]:
    return SPACES[data.get("space", "easy")]


def _normal(data: dict[str, Any], config: dict[str, str]) -> dict[str, str]:
    from knoblab.units import parse_size

    return {k: str(parse_size(str(config[k]))) if k in config else v
            for k, v in _defaults(data).items()}


def _near(gain: float, best: float) -> bool:
    return (1 + gain) / (1 + best) >= 1 - WITHIN


# --- compare ----------------------------------------------------------------------------------


def compare(data_path: Path, seeds: int, trials: int, log: Path, home: Path,
            budget: str | None = None, keep: Path | None = None) -> None:
    data = json.loads(data_path.read_text())
    done = {(r["method"], r["seed"]) for r in read_log(log)}
    for seed in range(1, seeds + 1):
        if ("knoblab", seed) not in done:
            append_log(log, _knoblab_tune(data, seed, trials, home, budget, keep))
            print(f"seed {seed} done", flush=True)


def _replay(data: dict[str, Any], method: str, seed: int, wall: float,
            trials: int | None = None) -> dict[str, Any]:
    """A search that scores each configuration once, from the grid's measurements, for `wall`
    seconds (or `trials` trials): each trial costs what a grid measurement cost. `method` is
    one of search_truth.sampler's ("tpe-once" is knoblab's TPE)."""
    import numpy as np
    import optuna
    from optuna.distributions import BaseDistribution, CategoricalDistribution
    from search_truth import sampler

    from knoblab.units import parse_size

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    rng = np.random.default_rng(seed)
    values = data["values"]
    cost = data["wall_seconds"] / data["measurements"]
    study = optuna.create_study(sampler=sampler(method.removesuffix("-once"), seed),
                                direction="maximize" if data.get("maximize") else "minimize")
    space: dict[str, BaseDistribution] = {k: CategoricalDistribution(v)
                                          for k, v in _space(data).items()}
    # As knoblab does, the current configuration (the defaults) is the first trial: what the
    # recommendation's claimed gain is measured against.
    defaults = _defaults(data)
    study.enqueue_trial({k: next(v for v in values if str(parse_size(v)) == defaults[k])
                         for k, values in _space(data).items()})
    seen: list[dict[str, Any]] = []
    seconds = 0.0
    while (seconds + cost <= wall) if trials is None else len(seen) < trials:
        trial = study.ask(space)
        key = _key(_normal(data, trial.params))
        row = [v for v in values[key] if v is not None]
        value = float(row[int(rng.integers(len(row)))])
        seconds += cost
        study.tell(trial, value)
        seen.append({"key": key, "seconds": round(seconds, 1)})
    best = study.best_trial
    ratio = float(best.value or 0) / float(study.trials[0].value or 1)
    claimed = ratio - 1 if data.get("maximize") else 1 / ratio - 1
    return {"method": method, "seed": seed, "trials": seen,
            "recommended": _key(_normal(data, best.params)), "claimed": round(claimed, 4)}


def _knoblab_tune(data: dict[str, Any], seed: int, trials: int, home: Path,
                  budget: str | None = None, keep: Path | None = None) -> dict[str, Any]:
    space = data.get("space", "easy")
    knobs = "".join(f"{k} = {{ values = {json.dumps(v)} }}\n" for k, v in _space(data).items())
    objective = 'objective = "tps"\n' if space == "oltp" else ""
    objective += f'budget = "{budget}"\n' if budget else ""
    tail = (f"[tune]\n{objective}trials = {trials}\nvalidate = 3\nstudy = \"bench-{seed}\"\n\n"
            f"[tune.knobs]\n{knobs}")
    with tempfile.TemporaryDirectory() as temporary:
        scratch = Path(temporary) if keep is None else keep / f"seed-{seed}"
        scratch.mkdir(parents=True, exist_ok=True)
        result, seconds, wall = run_tune(_spec_text(tail, f"bench-{seed}", seed, space),
                                         f"bench-{seed}", scratch, home)
    seen, spent = [], 0.0
    for t in result["trials"]:
        spent += seconds.get(t["number"], 0.0)
        config = {**_defaults(data), **_normal(data, {k: t["changes"][k] for k in t["changes"]
                                                       if k in _space(data)})}
        seen.append({"key": _key(config), "seconds": round(spent, 1), "state": t["state"]})
    chosen = result["recommended"]
    settings = {k: v for k, v in (chosen["settings"] if chosen else {}).items()
                if k in _space(data)}
    return {"method": "knoblab", "seed": seed, "trials": seen,
            "recommended": _key(_normal(data, settings)),
            "claimed": chosen["gain"] if chosen else 0.0,
            "ci95": chosen["ci95"] if chosen else None,
            "wall_seconds": round(wall, 1), "search_seconds": round(spent, 1)}


def run_tune(text: str, study: str, scratch: Path, home: Path
             ) -> tuple[dict[str, Any], dict[int, float], float]:
    """knoblab tune of the spec `text` (its study named `study`), in `scratch`: its JSON, each
    trial's seconds (from the study) and the wall time of the whole command."""
    import optuna

    spec, store = scratch / "tune.toml", scratch / "tune.sqlite"
    spec.write_text(text)
    began = time.monotonic()
    done = _knoblab(home, store, "tune", str(spec), "--out", str(scratch / "report"))
    wall = time.monotonic() - began
    if done.returncode != 0:
        sys.exit(f"knoblab tune failed: {done.stderr.strip()}")
    result = json.loads((scratch / "report" / "tune.json").read_text())
    trials = optuna.load_study(study_name=study,
                               storage=f"sqlite:///{scratch / 'tune-tune.sqlite'}").trials
    return result, {t.number: float(t.user_attrs.get("seconds", 0.0)) for t in trials}, wall


def read_log(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def append_log(log: Path, record: dict[str, Any]) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as f:
        f.write(json.dumps(record) + "\n")


# --- summarise --------------------------------------------------------------------------------


def summarise(data_path: Path, log: Path) -> None:
    data = json.loads(data_path.read_text())
    gains, base, best, se = truth(data)
    print(f"optimum {json.loads(best)}: {gains[best]:+.1%} over the defaults; "
          f"{sum(_near(g, gains[best]) for g in gains.values())} of {len(gains)} configurations "
          f"lie within 5% of it; standard error of a difference between two configurations "
          f"{se:.1%}")
    for key in sorted(gains, key=lambda k: -gains[k]):
        print(f"  {gains[key]:+7.1%}  {json.loads(key)}")
    records = read_log(log)
    runs: dict[str, list[dict[str, Any]]] = {
        method: [r for r in records if r["method"] == method]
        for method in ("knoblab", "random", "tpe-once")}
    for r in runs["knoblab"]:  # once-scored searches at the same wall time, where not logged
        for method in ("random", "tpe-once"):
            if not any(o["seed"] == r["seed"] for o in runs[method]):
                runs[method].append(_replay(data, method, r["seed"], r["wall_seconds"]))
    print("| method | seeds | trials (median) | trials to within 5% (median) | minutes to within "
          "5% | recommendation's true gain | within 5% of the optimum | claimed gain | truth "
          "inside the claimed 95% CI | a setting the grid cannot tell from its default |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for method, rows in runs.items():
        if not rows:
            continue
        reach, minutes, true, near, claimed, inside, intervals, idle = [], [], [], 0, [], 0, 0, 0
        for r in rows:
            first = next((i for i, t in enumerate(r["trials"], start=1)
                          if _near(gains[t["key"]], gains[best])), None)
            reach.append(first if first is not None else math.inf)
            if first is not None:
                minutes.append(r["trials"][first - 1]["seconds"] / 60)
            g = gains[r["recommended"]]
            true.append(g)
            near += _near(g, gains[best])
            if r["claimed"] is not None:
                claimed.append(r["claimed"])
            if r.get("ci95"):  # a claim made (keeping the defaults claims nothing)
                intervals += 1
                inside += r["ci95"][0] <= g <= r["ci95"][1]
            idle += bool(_idle(data, gains, se, r["recommended"]))
        print(f"| {method} | {len(rows)} | {statistics.median(len(r['trials']) for r in rows):g} | "
              f"{statistics.median(reach):g} | "
              f"{statistics.median(minutes) if minutes else math.nan:.1f} | "
              f"{', '.join(f'{g:+.0%}' for g in true)} | {near} of {len(rows)} | "
              f"{', '.join(f'{c:+.0%}' for c in claimed) or '—'} | "
              f"{f'{inside} of {intervals}' if method == 'knoblab' else '—'} | "
              f"{idle} of {len(rows)} |")


def compare_samplers(data_path: Path, methods: list[str], trials: int, seeds: int) -> None:
    """Each sampler scoring configurations once from the grid's measurements for `trials`
    trials, over the same `seeds` seeds: the trials until one lands within 5% of the grid's
    optimum (median; seeds short of it count as trials + 1), and how many seeds get there by
    5, 10 and `trials` trials."""
    data = json.loads(data_path.read_text())
    gains, _, best, _ = truth(data)
    print(f"{data_path.name}: {len(gains)} configurations, the optimum {gains[best]:+.1%}; "
          f"{sum(_near(g, gains[best]) for g in gains.values())} lie within 5% of it")
    print(f"| sampler | trials to within 5% (median) | by 5 | by 10 | by {trials} |")
    print("|---|---|---|---|---|")
    for method in methods:
        firsts = []
        for seed in range(1, seeds + 1):
            run = _replay(data, method, seed, math.inf, trials=trials)
            firsts.append(next((i for i, t in enumerate(run["trials"], start=1)
                                if _near(gains[t["key"]], gains[best])), trials + 1))
        by = [sum(f <= n for f in firsts) for n in (5, 10, trials)]
        print(f"| {method} | {statistics.median(firsts):g} | {by[0]} of {seeds} | "
              f"{by[1]} of {seeds} | {by[2]} of {seeds} |")


def _idle(data: dict[str, Any], gains: dict[str, float], se: float, key: str) -> list[str]:
    """The settings of configuration `key` that differ from the defaults and that the grid
    cannot tell from them: put back alone, the true gain moves by less than a standard error."""
    config, defaults = json.loads(key), _defaults(data)
    return [k for k, v in config.items() if v != defaults[k] and
            abs(math.log1p(gains[key]) - math.log1p(gains[_key({**config, k: defaults[k]})]))
            < se]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grid")
    g.add_argument("--space", choices=sorted(SPACES), default="hard")
    g.add_argument("--rounds", type=int, default=6)
    g.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("compare")
    c.add_argument("data", type=Path)
    c.add_argument("--seeds", type=int, default=5)
    c.add_argument("--trials", type=int, default=15)
    c.add_argument("--log", type=Path, required=True)
    c.add_argument("--budget", help="each seed's study budget, e.g. 10m (search 40%% of it)")
    c.add_argument("--keep", type=Path, help="keep each seed's study, store and report here")
    s = sub.add_parser("summarise")
    s.add_argument("data", type=Path)
    s.add_argument("log", type=Path)
    m = sub.add_parser("samplers", help="Optuna's samplers on a grid, scored once, same seeds")
    m.add_argument("data", type=Path)
    m.add_argument("--methods", nargs="+", default=["random", "qmc", "tpe", "cmaes"])
    m.add_argument("--trials", type=int, default=20)
    m.add_argument("--seeds", type=int, default=50)
    args = parser.parse_args()
    home = Path(os.environ.get("KNOBLAB_HOME") or Path.home() / ".knoblab")
    if args.command == "grid":
        grid(args.space, args.rounds, args.out, home)
    elif args.command == "compare":
        compare(args.data, args.seeds, args.trials, args.log, home, args.budget, args.keep)
    elif args.command == "samplers":
        compare_samplers(args.data, args.methods, args.trials, args.seeds)
    else:
        summarise(args.data, args.log)


if __name__ == "__main__":
    main()
