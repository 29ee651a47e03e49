"""knoblab tune where the truth is known: a response surface the server computes from its own
settings, so that every configuration's true cost is exact while the noise is the machine's.

    .venv/bin/python benchmarks/search_truth.py noise --rounds 25 --out docs/data/truth-noise.json
    .venv/bin/python benchmarks/search_truth.py tune --seeds 10 --trials 15 \\
        --log docs/data/truth-tune.jsonl
    .venv/bin/python benchmarks/search_truth.py summarise docs/data/truth-noise.json \\
        docs/data/truth-tune.jsonl

The workload is one statement, `SELECT BENCHMARK(N, MD5(...))`, whose N the server works out
from five of its session settings: N = N0 × m, with m = 1 at the optimum (sort_buffer_size
near 362K, join_buffer_size near 5.3M, join_cache_level 6), a bowl on the log scale of the
sizes, an interaction between the two sizes, and two settings (read_buffer_size,
read_rnd_buffer_size) that do nothing. The statement's time is proportional to m (the noise
run checks it), so a configuration's true gain over the defaults is m(defaults) / m - 1.

noise: one sandbox; the defaults, the optimum and eight configurations drawn at random, each
measured once per round for `--rounds` rounds, interleaved, as a once-scored search measures a
trial (settings set, a new connection, the statement once). Gives the time per unit of m,
how far from proportional it is, the spread of a single measurement (log residuals), and the
wall time a once-scored trial costs.

tune: per seed, knoblab tune for real (the CLI, real sandboxes, a study of its own, validation
and reduction), `--trials` trials. Each finished seed is appended to the log.

samplers: Optuna's samplers (TPE as knoblab uses it, random, Sobol, CMA-ES, GP) scoring once
on the same seeds, in simulation as summarise's: trials until one lands within 5%.

summarise: random search and Optuna's TPE scoring each configuration once, at the wall time
knoblab took for the same seed: their trials cost what the noise run measured, and each
measurement is the true time times a residual drawn from the noise run's (the machine's own
spread, resampled). Then, per method over seeds: trials and minutes until a trial lands within
5% of the optimum, the true gain of what it recommends, whether that is within 5%, the gain it
claims (and whether its interval holds the truth), and how often it recommends a setting that
does nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tune_search import append_log, read_log, run_tune

N0 = 300_000  # MD5s at the optimum: about 0.1 s here
# name: (low, high, log scale, default); every value is a number of bytes or a level
KNOBS: dict[str, tuple[int, int, bool, int]] = {
    "sort_buffer_size": (32 << 10, 32 << 20, True, 2 << 20),
    "join_buffer_size": (128 << 10, 64 << 20, True, 256 << 10),
    "join_cache_level": (1, 8, False, 2),
    "read_buffer_size": (8 << 10, 8 << 20, True, 128 << 10),  # does nothing here
    "read_rnd_buffer_size": (8 << 10, 8 << 20, True, 256 << 10),  # does nothing here
}
NOTHING = ("read_buffer_size", "read_rnd_buffer_size")
DEFAULTS = {k: v[3] for k, v in KNOBS.items()}
# Where each matters: its position on [0, 1] (log scale for sizes) at the optimum.
CENTRE = {"sort_buffer_size": 0.35, "join_buffer_size": 0.6, "join_cache_level": 5 / 7}
OPTIMUM = {**DEFAULTS, "sort_buffer_size": round((32 << 10) * 2 ** 3.5),
           "join_buffer_size": round((128 << 10) * 2 ** 5.4), "join_cache_level": 6}
WITHIN = 0.05


def _position_sql(name: str) -> str:
    low, high, log, _ = KNOBS[name]
    if log:
        return f"(LOG2(@@{name} / {low}) / {math.log2(high / low):g} - {CENTRE[name]:.6f})"
    return f"((@@{name} - {low}) / {high - low} - {CENTRE[name]:.6f})"


def _position(name: str, value: float) -> float:
    low, high, log, _ = KNOBS[name]
    spot = math.log2(value / low) / math.log2(high / low) if log else \
        (value - low) / (high - low)
    return spot - CENTRE[name]


def body() -> str:
    u, v, w = (_position_sql(k) for k in CENTRE)
    return (f"SELECT BENCHMARK(CAST({N0} * (1 + 2.0 * POW({u}, 2) + 1.5 * POW({v}, 2) "
            f"+ 2.0 * {u} * {v} + 1.0 * POW({w}, 2)) AS UNSIGNED), MD5('knoblab'));")


def cost(config: dict[str, Any]) -> float:
    """m: the true time relative to the optimum's (1 there)."""
    values = {k: float(config.get(k, DEFAULTS[k])) for k in KNOBS}
    u, v, w = (_position(k, values[k]) for k in CENTRE)
    return 1 + 2.0 * u * u + 1.5 * v * v + 2.0 * u * v + 1.0 * w * w


def true_gain(config: dict[str, Any]) -> float:
    return cost(DEFAULTS) / cost(config) - 1


def near(config: dict[str, Any]) -> bool:
    return cost(config) <= 1 + WITHIN


def spec_text(seed: int, trials: int, budget: float | None = None) -> str:
    knobs = "".join(
        f"{k} = {{ low = {lo}, high = {hi}, scale = \"{'log' if log else 'linear'}\" }}\n"
        for k, (lo, hi, log, _) in KNOBS.items())
    return (f'name = "truth-{seed}"\n[server]\nbinary = "mariadbd"\n'
            f'[workload]\nkind = "script"\nbody = """\n{body()}\n"""\nconnections = 1\n'
            f"iterations = 1\n[statistics]\nmin_effect = 0.03\nseed = {seed}\n"
            f'[tune]\ntrials = {trials}\nvalidate = 3\nbatch = 6\nstudy = "truth-{seed}"\n'
            + (f'budget = "{budget:g}s"\n' if budget else "") +
            f"[tune.knobs]\n{knobs}")


# --- noise ------------------------------------------------------------------------------------


def noise(rounds: int, out: Path, home: Path) -> None:
    from knoblab.server.binary import find_binary
    from knoblab.server.sandbox import Sandbox, base_template

    rng = random.Random(7)
    configs = [dict(DEFAULTS), dict(OPTIMUM)] + [_draw(rng) for _ in range(8)]
    binary = find_binary("mariadbd")
    times: list[list[float]] = [[] for _ in configs]
    trial_seconds: list[float] = []
    with Sandbox(binary, base_template(binary, home) / "data", {}, home=home) as server:
        for _ in range(rounds):
            order = list(range(len(configs)))
            rng.shuffle(order)
            for i in order:
                began = time.perf_counter()
                seconds = _measure_once(server, configs[i])
                trial_seconds.append(time.perf_counter() - began)
                times[i].append(seconds)
    data = {"rounds": rounds, "configs": configs, "m": [cost(c) for c in configs],
            "times": times, "trial_seconds": trial_seconds, "body": body()}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1))
    fit = _fit(data)
    print(f"{len(configs)} configurations × {rounds} rounds -> {out}; {fit['per_m'] * 1e3:.1f} "
          f"ms per unit of m, intercept {fit['intercept'] * 1e3:+.1f} ms, log residual sd "
          f"{fit['sd']:.1%}, a once-scored trial {statistics.fmean(trial_seconds):.3f} s")


def _draw(rng: random.Random) -> dict[str, int]:
    config = {}
    for k, (lo, hi, log, _) in KNOBS.items():
        config[k] = round(math.exp(rng.uniform(math.log(lo), math.log(hi)))) if log else \
            rng.randint(lo, hi)
    return config


def _measure_once(server: Any, config: dict[str, Any]) -> float:
    """One trial of a once-scored search: the settings, a new connection, the statement."""
    with server.connect() as conn, conn.cursor() as cur:
        for k, v in config.items():
            cur.execute(f"SET GLOBAL {k} = {int(v)}")
    with server.connect() as conn, conn.cursor() as cur:
        began = time.perf_counter()
        cur.execute(body())
        cur.fetchall()
        return time.perf_counter() - began


def _fit(data: dict[str, Any]) -> dict[str, Any]:
    """time = intercept + per_m × m over the configurations' medians; the log residuals of
    single measurements around their configuration's median."""
    ms = data["m"]
    medians = [statistics.median(t) for t in data["times"]]
    slope, intercept = statistics.linear_regression(ms, medians)
    residuals = [math.log(x / med) for row, med in zip(data["times"], medians, strict=True)
                 for x in row]
    return {"per_m": slope, "intercept": intercept, "residuals": residuals,
            "sd": statistics.stdev(residuals),
            "trial": statistics.fmean(data["trial_seconds"])}


# --- tune -------------------------------------------------------------------------------------


def tune(seeds: int, trials: int, log: Path, home: Path, keep: Path | None,
         budget: float | None = None) -> None:
    from knoblab.units import parse_size

    done = {r["seed"] for r in read_log(log)}
    for seed in range(1, seeds + 1):
        if seed in done:
            continue
        with tempfile.TemporaryDirectory() as temporary:
            scratch = Path(temporary) if keep is None else keep / f"seed-{seed}"
            scratch.mkdir(parents=True, exist_ok=True)
            result, seconds, wall = run_tune(spec_text(seed, trials, budget),
                                             f"truth-{seed}", scratch, home)
        seen, spent = [], 0.0
        for t in result["trials"]:
            spent += seconds.get(t["number"], 0.0)
            config = {**DEFAULTS, **{k: int(parse_size(str(v))) for k, v in
                                     t["changes"].items() if k in KNOBS}}
            seen.append({"config": config, "seconds": round(spent, 1), "state": t["state"]})
        chosen = result["recommended"]
        settings = {k: int(parse_size(str(v))) for k, v in
                    (chosen["settings"] if chosen else {}).items() if k in KNOBS}
        append_log(log, {"seed": seed, "trials": seen, "recommended": {**DEFAULTS, **settings},
                         "changes": sorted(settings),
                         "claimed": chosen["gain"] if chosen else 0.0,
                         "ci95": chosen["ci95"] if chosen else None,
                         # false: the claim is the full candidate's, the reduced one unmeasured
                         "own_gain": chosen.get("own_gain", True) if chosen else None,
                         "reduction": result.get("reduction"),
                         "wall_seconds": round(wall, 1), "search_seconds": round(spent, 1)})
        print(f"seed {seed}: {wall / 60:.1f} min, recommends {sorted(settings) or 'nothing'}, "
              f"true gain {true_gain({**DEFAULTS, **settings}):+.0%}", flush=True)


# --- summarise --------------------------------------------------------------------------------


def once_scored(method: str, seed: int, wall: float, fit: dict[str, Any],
                startup: int = 10, trials: int | None = None) -> dict[str, Any]:
    """A search scoring each configuration once, for `wall` seconds of trials as the noise run
    measured them (or `trials` of them): each measurement the true time times a residual
    drawn from that run. TPE samples its first `startup` trials at random."""
    import optuna
    from optuna.distributions import BaseDistribution, IntDistribution

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    rng = random.Random(seed)
    study = optuna.create_study(sampler=sampler(method, seed, startup), direction="minimize")
    space: dict[str, BaseDistribution] = {k: IntDistribution(lo, hi, log=log)
                                          for k, (lo, hi, log, _) in KNOBS.items()}
    study.enqueue_trial(dict(DEFAULTS))  # the current configuration first, as knoblab does
    seen: list[dict[str, Any]] = []
    spent = 0.0
    while (spent + fit["trial"] <= wall) if trials is None else len(seen) < trials:
        trial = study.ask(space)
        value = (fit["intercept"] + fit["per_m"] * cost(trial.params)) * \
            math.exp(rng.choice(fit["residuals"]))
        spent += fit["trial"]
        study.tell(trial, value)
        seen.append({"config": trial.params, "seconds": round(spent, 1)})
    best = study.best_trial
    return {"method": method, "seed": seed, "trials": seen, "recommended": best.params,
            "changes": sorted(k for k, v in best.params.items() if v != DEFAULTS[k]),
            "claimed": float(study.trials[0].value or 0) / float(best.value or 1) - 1,
            "ci95": None}


def sampler(method: str, seed: int, startup: int = 10) -> Any:
    """Optuna's samplers by name: "tpe" as knoblab uses it (multivariate; `startup` trials at
    random first), "random", "qmc" (Sobol), "cmaes" (CMA-ES, which needs the cmaes package;
    the space is all numbers) and "gp" (which needs PyTorch)."""
    import optuna

    samplers = optuna.samplers
    made = {"random": lambda: samplers.RandomSampler(seed=seed),
            "tpe": lambda: samplers.TPESampler(seed=seed, multivariate=True,
                                               n_startup_trials=startup),
            "qmc": lambda: samplers.QMCSampler(seed=seed, scramble=True),
            "cmaes": lambda: samplers.CmaEsSampler(seed=seed, n_startup_trials=startup),
            "gp": lambda: samplers.GPSampler(seed=seed, n_startup_trials=startup)}
    return made[method]()


def compare_samplers(noise_path: Path, methods: list[str], trials: int, seeds: int) -> None:
    """Each sampler scoring configurations once for `trials` trials over `seeds` seeds, the
    same seeds for all, each measurement the true time times a residual of the noise run:
    the trials it takes until one lands within 5% of the optimum (the median, and how many
    seeds get there by 20, 40 and `trials`), and its seconds of sampling a trial."""
    fit = _fit(json.loads(noise_path.read_text()))
    print(f"| sampler | trials to within 5% (median; seeds short of it count as {trials + 1}) "
          f"| within 5% by 20 | by 40 | by {trials} | its own time a trial |")
    print("|---|---|---|---|---|---|")
    for method in methods:
        firsts, took = [], 0.0
        for seed in range(1, seeds + 1):
            began = time.process_time()
            name, _, first = method.partition(":")  # "tpe:5": 5 trials at random first
            run = once_scored(name, seed, math.inf, fit, trials=trials,
                              startup=int(first or 10))
            took += time.process_time() - began
            firsts.append(next((i for i, t in enumerate(run["trials"], start=1)
                                if near(t["config"])), trials + 1))
        by = [sum(f <= n for f in firsts) for n in (20, 40, trials)]
        print(f"| {method} | {statistics.median(firsts):g} | {by[0]} of {seeds} | "
              f"{by[1]} of {seeds} | {by[2]} of {seeds} | "
              f"{1000 * took / (seeds * trials):.0f} ms |")


def summarise(noise_path: Path, log: Path, tpe_trials: int) -> None:
    data = json.loads(noise_path.read_text())
    fit = _fit(data)
    print(f"noise run: {fit['per_m'] * 1e3:.1f} ms per unit of m, intercept "
          f"{fit['intercept'] * 1e3:+.1f} ms; a single measurement's log sd {fit['sd']:.1%}; a "
          f"once-scored trial costs {fit['trial']:.3f} s")
    print(f"defaults m = {cost(DEFAULTS):.3f}: the optimum is {true_gain(OPTIMUM):+.1%} over "
          "them")
    records = read_log(log)
    runs: dict[str, list[dict[str, Any]]] = {"knoblab": records, "random": [], "tpe-once": []}
    for r in records:
        runs["random"].append(once_scored("random", r["seed"], r["wall_seconds"], fit))
        # TPE's own work grows with the trials it has seen (about a second per ask past a
        # thousand): it gets at most `tpe_trials` of the wall time's trials.
        runs["tpe-once"].append(once_scored("tpe", r["seed"], r["wall_seconds"], fit,
                                            trials=min(tpe_trials, int(r["wall_seconds"] /
                                                                       fit["trial"]))))
    print("| method | seeds | trials (median) | trials to within 5% (median) | minutes to "
          "within 5% (median) | true gain of the recommendation | within 5% of the optimum | "
          "claimed gain | truth inside the claimed 95% CI | recommends a do-nothing setting |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for method, rows in runs.items():
        if not rows:
            continue
        reach, minutes, gains, claims, inside, nothing = [], [], [], [], 0, 0
        for r in rows:
            first = next((i for i, t in enumerate(r["trials"], start=1) if near(t["config"])),
                         None)
            reach.append(first if first is not None else math.inf)
            if first is not None:
                minutes.append(r["trials"][first - 1]["seconds"] / 60)
            gain = true_gain(r["recommended"])
            gains.append(gain)
            claims.append(r["claimed"])
            if r["ci95"] is not None:
                inside += r["ci95"][0] <= gain <= r["ci95"][1]
            nothing += any(k in NOTHING for k in r["changes"])
        near_count = sum(near(r["recommended"]) for r in rows)
        print(f"| {method} | {len(rows)} | {statistics.median(len(r['trials']) for r in rows):g} "
              f"| {statistics.median(reach):g} | "
              f"{statistics.median(minutes) if minutes else math.nan:.1f} | "
              f"{', '.join(f'{g:+.0%}' for g in gains)} | {near_count} of {len(rows)} | "
              f"{', '.join(f'{c:+.0%}' for c in claims)} | "
              f"{f'{inside} of {len(rows)}' if method == 'knoblab' else '—'} | "
              f"{nothing} of {len(rows)} |")


def startup(noise_path: Path, trials: int, seeds: int) -> None:
    """TPE scoring once, `trials` trials, with 2, 5 or 10 of them drawn at random first (and
    random search): the true cost of the best configuration it tried and of what it
    recommends, over seeds. Cheap (the noise run's residuals): it says whether TPE's start-up
    is what holds a small budget back."""
    fit = _fit(json.loads(noise_path.read_text()))
    print(f"| sampler ({trials} trials, scored once) | best tried: median m | tried within 5%"
          " | recommended: median m |")
    print("|---|---|---|---|")
    for label, method, first in [("random", "random", 10), ("TPE, 10 at random first", "tpe", 10),
                                 ("TPE, 5 at random first", "tpe", 5),
                                 ("TPE, 2 at random first", "tpe", 2)]:
        tried, chosen = [], []
        for seed in range(1, seeds + 1):
            r = once_scored(method, seed, math.inf, fit, startup=first, trials=trials)
            tried.append(min(cost(t["config"]) for t in r["trials"]))
            chosen.append(cost(r["recommended"]))
        print(f"| {label} | {statistics.median(tried):.3f} | "
              f"{sum(m <= 1 + WITHIN for m in tried)} of {seeds} | "
              f"{statistics.median(chosen):.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    n = sub.add_parser("noise")
    n.add_argument("--rounds", type=int, default=25)
    n.add_argument("--out", type=Path, required=True)
    t = sub.add_parser("tune")
    t.add_argument("--seeds", type=int, default=10)
    t.add_argument("--trials", type=int, default=15)
    t.add_argument("--log", type=Path, required=True)
    t.add_argument("--keep", type=Path, help="keep each seed's store and report here")
    t.add_argument("--budget", type=float, help="the study's budget, in seconds (its wall "
                   "time: the search, validation, reduction and confirmation)")
    s = sub.add_parser("summarise")
    s.add_argument("noise", type=Path)
    s.add_argument("log", type=Path)
    s.add_argument("--tpe-trials", type=int, default=300)
    u = sub.add_parser("startup")
    u.add_argument("noise", type=Path)
    u.add_argument("--trials", type=int, default=20)
    u.add_argument("--seeds", type=int, default=50)
    c = sub.add_parser("samplers")
    c.add_argument("noise", type=Path)
    c.add_argument("--methods", nargs="+", default=["random", "qmc", "tpe", "cmaes", "gp"])
    c.add_argument("--trials", type=int, default=80)
    c.add_argument("--seeds", type=int, default=30)
    args = parser.parse_args()
    home = Path(os.environ.get("KNOBLAB_HOME") or Path.home() / ".knoblab")
    if args.command == "noise":
        noise(args.rounds, args.out, home)
    elif args.command == "tune":
        tune(args.seeds, args.trials, args.log, home, args.keep, args.budget)
    elif args.command == "startup":
        startup(args.noise, args.trials, args.seeds)
    elif args.command == "samplers":
        compare_samplers(args.noise, args.methods, args.trials, args.seeds)
    else:
        summarise(args.noise, args.log, args.tpe_trials)


if __name__ == "__main__":
    main()
