"""knoblab tune on a replayed capture, screened on a slice of it or not, against a long grid.

    KNOBLAB_HOME=/tmp/bench/home .venv/bin/python benchmarks/tune_replay.py --capture 60 \\
        --rate 50 --grid-rounds 3 --budget 15m --keep /tmp/bench/replay \\
        --log docs/data/tune-replay-2026-11-27.json

1. "Production": a sandbox with innodb_buffer_pool_size = POOL, holding sysbench's tables,
   running sysbench oltp_read_write at RATE transactions a second on THREADS text-protocol
   connections opened before the capture (a pool, as production_tune.py), and
   `knoblab capture --for CAPTURE s --data all`: its statements, its data, its configuration.
2. The grid: `knoblab run` of the capture's spec over every combination of VALUES (the
   production's value of each setting among them), GRID_ROUNDS rounds: each configuration's
   time against the best one's (the run's ratio_to_best). The best of the grid is the truth
   the tunes are held to.
3. Two tunes of the capture's spec over the same values, given BUDGET: one screening each
   candidate first on SCREEN of the capture ([tune] screen), one measuring the whole capture
   every time. Per tune: its wall time until the recommendation, what it recommends, and
   that configuration's time in the grid against the grid's best (within 5%: at most 1.05).

The replay goes as fast as the server answers (speed = "max"), so a capture taken at a
modest rate replays in a fraction of its window: the grid is long in rounds, not in hours.
The record of it all goes to LOG (JSON).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from production_tune import capture, recommended

from knoblab.units import parse_size

# Four settings, the production's value first in each list (the pool's is --pool).
VALUES: dict[str, list[str]] = {
    "innodb_buffer_pool_size": ["32M", "128M"],
    "innodb_log_file_size": ["96M", "512M"],
    "innodb_io_capacity": ["200", "4000"],
    "innodb_adaptive_hash_index": ["OFF", "ON"],
}
WITHIN = 1.05


def knoblab(folder: Path, env: dict[str, str], *args: str) -> float:
    """A knoblab command on the benchmark's store; its wall time in seconds."""
    began = time.monotonic()
    subprocess.run([sys.executable, "-m", "knoblab.cli", "--store",
                    f"sqlite:///{folder / 'store.sqlite'}", *args], env=env, check=True)
    took = time.monotonic() - began
    print(f"[knoblab {args[0]}: {took:,.0f} s]", flush=True)
    return took


def with_section(spec: str, section: str, lines: list[str]) -> str:
    """The capture's spec with `lines` added at the top of its [section] table."""
    return spec.replace(f"[{section}]\n", f"[{section}]\n" + "".join(f"{x}\n" for x in lines),
                        1)


def without_tune(spec: str) -> str:
    return spec.replace('[tune]\nknobs = "auto"\n', "")


def values(args: argparse.Namespace) -> dict[str, list[str]]:
    return {**VALUES, "innodb_buffer_pool_size": [args.pool, *VALUES[
        "innodb_buffer_pool_size"]]}


def grid(folder: Path, env: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    spec = without_tune((folder / "cap" / "spec.toml").read_text())
    # the swept settings' production values are among the grid's, not in [server.config]
    spec = "".join(line for line in spec.splitlines(keepends=True)
                   if line.split(" = ")[0] not in VALUES)
    spec = with_section(spec, "workload", [f"repetitions = {args.grid_rounds}"])
    spec = spec.replace('-capture"', '-grid"', 1)
    spec += "\n[sweep]\n" + "".join(f"{k} = {json.dumps(v)}\n"
                                    for k, v in values(args).items())
    path = folder / "cap" / "grid.toml"
    path.write_text(spec)
    took = knoblab(folder, env, "run", str(path), "--out", str(folder / "grid"), "--json",
                   str(folder / "grid.json"))
    result = json.loads((folder / "grid.json").read_text())
    lower = result["objective"]["direction"] == "minimize"
    # Each configuration's cost against the best's: its time over the best's (or the best's
    # throughput over its), 1 for the best.
    points = [{"settings": {k: normal(v) for k, v in p["settings"].items() if k in VALUES},
               "ratio_to_best": None if p["ratio_to_best"] is None else
               p["ratio_to_best"] if lower else 1 / p["ratio_to_best"], "n": p["n"]}
              for p in result["points"]]
    return {"seconds": round(took, 1), "points": points,
            "configurations": len(list(itertools.product(*values(args).values())))}


def normal(value: Any) -> str:
    text = str(value)
    try:
        return str(int(parse_size(text)))
    except Exception:  # not a size: a word (ON, OFF), compared as such
        return text.upper()


def tune(folder: Path, env: dict[str, str], args: argparse.Namespace, screen: str | None,
         production: dict[str, str]) -> dict[str, Any]:
    name = "screened" if screen else "whole"
    spec = without_tune((folder / "cap" / "spec.toml").read_text())
    spec = spec.replace('-capture"', f'-tune-{name}"', 1)
    spec += "\n[tune]\n" + (f'screen = "{screen}"\n' if screen else "") + \
        "[tune.knobs]\n" + "".join(f"{k} = {{ values = {json.dumps(v)} }}\n"
                                    for k, v in values(args).items())
    path = folder / "cap" / f"tune-{name}.toml"
    path.write_text(spec)
    out = folder / f"study-{name}"
    took = knoblab(folder, env, "tune", str(path), "--budget", args.budget, "--out", str(out))
    advice = recommended(out / "recommended.cnf")
    document = json.loads((out / "tune.json").read_text())
    chosen = document.get("recommended") or {}
    config = {k: normal(advice.get(k, production.get(k, v[0])))
              for k, v in values(args).items()}
    return {"screen": screen, "seconds": round(took, 1), "recommended": advice,
            "config": config, "claimed": chosen.get("gain"), "ci95": chosen.get("ci95"),
            "trials": len(document.get("trials", [])),
            "states": [t.get("state") for t in document.get("trials", [])]}


def begun(args: argparse.Namespace) -> tuple[Path, Path, dict[str, str], dict[str, Any]]:
    """A benchmark's folder (--keep), its knoblab home (KNOBLAB_HOME, else one in the
    folder), the environment of its knoblab commands, and its record (--log, read back when
    it exists, so that a run goes on where it stopped)."""
    folder = args.keep
    folder.mkdir(parents=True, exist_ok=True)
    home = Path(os.environ.get("KNOBLAB_HOME") or folder / "home")
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "KNOBLAB_HOME": str(home)}
    env.pop("KNOBLAB_STORE", None)
    os.environ["KNOBLAB_HOME"] = str(home)
    record: dict[str, Any] = json.loads(args.log.read_text()) if args.log.exists() else {}
    record["args"] = {k: str(v) for k, v in vars(args).items()}
    return folder, home, env, record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", default="8M")
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--table-size", type=int, default=25_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rate", type=int, default=50, help="transactions a second")
    parser.add_argument("--capture", type=int, default=60, help="seconds")
    parser.add_argument("--grid-rounds", type=int, default=3)
    parser.add_argument("--budget", default="15m")
    parser.add_argument("--screen", default="25%")
    parser.add_argument("--keep", type=Path, required=True)
    parser.add_argument("--log", type=Path, required=True)
    args = parser.parse_args()
    folder, home, env, record = begun(args)

    def save() -> None:
        args.log.write_text(json.dumps(record, indent=1) + "\n")

    if not (folder / "cap" / "spec.toml").exists():
        capture(folder, home, args, env)
    summary = json.loads((folder / "cap" / "capture.json").read_text())
    record["capture"] = {"statements": summary["log"]["statements"],
                         "connections": summary["log"]["connections"]}
    import tomllib
    production = {k: normal(v) for k, v in tomllib.loads(
        (folder / "cap" / "spec.toml").read_text()).get("server", {}).get("config", {}).items()}
    if "grid" not in record:
        record["grid"] = grid(folder, env, args)
        save()
    for screen in (args.screen, None):
        key = f"tune-{'screened' if screen else 'whole'}"
        if key not in record:
            record[key] = tune(folder, env, args, screen, production)
            save()
    ratios = {json.dumps(p["settings"], sort_keys=True): p["ratio_to_best"]
              for p in record["grid"]["points"]}
    best = min(record["grid"]["points"], key=lambda p: p["ratio_to_best"] or 1e9)
    print(f"grid: {record['grid']['configurations']} configurations x {args.grid_rounds} "
          f"rounds in {record['grid']['seconds'] / 60:.1f} min; best {best['settings']}")
    for key in ("tune-screened", "tune-whole"):
        t = record[key]
        ratio = ratios.get(json.dumps(t["config"], sort_keys=True))
        t["ratio_to_best"] = ratio
        print(f"{key}: {t['seconds'] / 60:.1f} min, {t['trials']} trials, recommends "
              f"{t['recommended'] or 'nothing'}; in the grid {ratio if ratio else '?'} x the "
              f"best ({'within 5%' if ratio is not None and ratio <= WITHIN else 'not within 5%'})")
    save()


if __name__ == "__main__":
    main()
