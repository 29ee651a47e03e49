"""How well a slice of a real capture ranks configurations as the whole capture does, and what
a measurement of each costs: the figure that decides how small a part of the capture a tune's
trials may replay.

    KNOBLAB_HOME=/tmp/bench/home .venv/bin/python benchmarks/slice_fidelity.py --capture 60 \\
        --slices 5s 15s --rounds 2 --keep /tmp/bench/slices \\
        --log docs/data/slice-fidelity-2026-11-28.json

1. "Production" as in production_tune.py: a sandbox with innodb_buffer_pool_size = POOL under
   sysbench oltp_read_write at full speed on THREADS text-protocol connections opened before
   the capture, and `knoblab capture --for CAPTURE s --data all`.
2. The same grid of configurations (VALUES: production's pool and larger ones, two redo log
   sizes) measured by `knoblab run` of the capture's spec, ROUNDS rounds, once replaying the
   whole capture and once for each slice ([workload] slice: each session's first seconds).
3. Per fidelity: the wall time of a measurement, the rank correlation (Spearman) of its
   configurations' times against the whole capture's, the pairs the whole capture tells apart
   (medians APART or more from each other) that the slice orders as the whole does, and its
   regret: the whole capture's time of the configuration the slice finds fastest, against the
   fastest there (1.00: the same).

The record goes to LOG (JSON), each grid saved as it ends; run again with the same LOG, it
measures only what is missing (nothing, once every grid is there: the figures again).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from production_tune import capture
from scipy import stats
from tune_replay import begun, knoblab, normal, with_section, without_tune

VALUES: dict[str, list[str]] = {
    "innodb_buffer_pool_size": ["32M", "64M", "128M", "256M"],
    "innodb_log_file_size": ["96M", "512M"],
}


def grid(folder: Path, env: dict[str, str], rounds: int, part: str | None) -> dict[str, Any]:
    """The grid measured on `part` of the capture (None: the whole): each configuration's
    median time and ratio to the fastest, and the wall time of a measurement."""
    name = f"grid-{part or 'whole'}"
    spec = without_tune((folder / "cap" / "spec.toml").read_text())
    spec = "".join(line for line in spec.splitlines(keepends=True)
                   if line.split(" = ")[0] not in VALUES)
    lines = [f"repetitions = {rounds}"] + ([f'slice = "{part}"'] if part else [])
    spec = with_section(spec, "workload", lines).replace('-capture"', f'-{name}"', 1)
    spec += "\n[sweep]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in VALUES.items())
    path = folder / "cap" / f"{name}.toml"
    path.write_text(spec)
    took = knoblab(folder, env, "run", str(path), "--out", str(folder / name), "--json",
                   str(folder / f"{name}.json"))
    result = json.loads((folder / f"{name}.json").read_text())
    points = [{"settings": {k: normal(v) for k, v in p["settings"].items() if k in VALUES},
               "median": p["median"], "n": p["n"]} for p in result["points"]]
    measured = sum(p["n"] for p in points) or 1
    return {"part": part, "seconds": round(took, 1),
            "seconds_per_measurement": round(took / measured, 2), "points": points}


def key(settings: dict[str, str]) -> str:
    return json.dumps(settings, sort_keys=True)


def agreement(whole: dict[str, Any], part: dict[str, Any], apart: float) -> dict[str, Any]:
    """Spearman's rank correlation of the part's medians against the whole's, over the
    configurations both measured; of the pairs whose medians on the whole differ by `apart`
    or more (a share of the faster), those the part orders the same way; and the part's
    regret on the whole. Over configurations the whole cannot tell apart a rank correlation
    measures noise; the pairs told apart are what a search must not get wrong."""
    on_whole = {key(p["settings"]): p["median"] for p in whole["points"] if p["median"]}
    on_part = {key(p["settings"]): p["median"] for p in part["points"] if p["median"]}
    both = sorted(set(on_whole) & set(on_part))
    rho = stats.spearmanr([on_whole[k] for k in both], [on_part[k] for k in both]).statistic
    chosen = min(both, key=lambda k: on_part[k])
    told = [(a, b) for i, a in enumerate(both) for b in both[i + 1:]
            if max(on_whole[a], on_whole[b]) >= (1 + apart) * min(on_whole[a], on_whole[b])]
    kept = sum((on_whole[a] < on_whole[b]) == (on_part[a] < on_part[b]) for a, b in told)
    return {"configurations": len(both), "spearman": round(float(rho), 3),
            "pairs_apart": len(told), "pairs_kept": kept, "apart": apart,
            "chooses": json.loads(chosen),
            "regret": round(on_whole[chosen] / min(on_whole[k] for k in both), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", default="32M")
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--table-size", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--capture", type=int, default=60, help="seconds")
    parser.add_argument("--slices", nargs="+", default=["5s", "15s"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--apart", type=float, default=0.15,
                        help="pairs whose medians on the whole differ by this share or more "
                             "are the ones told apart")
    parser.add_argument("--keep", type=Path, required=True)
    parser.add_argument("--log", type=Path, required=True)
    args = parser.parse_args()
    folder, home, env, record = begun(args)

    def save() -> None:
        args.log.write_text(json.dumps(record, indent=1) + "\n")

    grids = record.setdefault("grids", {})
    for part in [None, *args.slices]:
        name = part or "whole"
        if name in grids:
            continue
        if not (folder / "cap" / "spec.toml").exists():
            began = time.monotonic()
            capture(folder, home, args, env)
            record["capture_seconds"] = round(time.monotonic() - began, 1)
            summary = json.loads((folder / "cap" / "capture.json").read_text())
            record["capture"] = {"statements": summary["log"]["statements"],
                                 "connections": summary["log"]["connections"]}
        grids[name] = grid(folder, env, args.rounds, part)
        save()
    whole = grids["whole"]
    print(f"capture: {record['capture']['statements']:,} statements from "
          f"{record['capture']['connections']} connections")
    print(f"{'fidelity':>9} {'s/measurement':>14} {'Spearman':>9} "
          f"{'pairs apart kept':>17} {'regret':>7}  chooses")
    for name, measured in grids.items():
        found = agreement(whole, measured, args.apart)
        measured["agreement"] = found
        kept = f"{found['pairs_kept']} of {found['pairs_apart']}"
        print(f"{name:>9} {measured['seconds_per_measurement']:>14.1f} "
              f"{found['spearman']:>9.2f} {kept:>17} {found['regret']:>7.2f}  "
              f"{found['chooses']}")
    save()


if __name__ == "__main__":
    main()
