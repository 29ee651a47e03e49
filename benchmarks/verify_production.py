"""knoblab verify against the truth: a recommendation verified on a "production" server under
its own load, closed loop and open loop, beside what sysbench itself measured in the same
windows.

    .venv/bin/python benchmarks/verify_production.py --from /tmp/bench/prod/study \\
        --for 10m --window 30s --settle 15s --rate 400 --log docs/data/verify-2026-11-28.json

1. "Production": a sandbox started with innodb_buffer_pool_size = POOL, holding sysbench's
   tables, as benchmarks/production_tune.py starts it (the same data, test and ids).
2. For each load: closed loop (THREADS connections at full speed) and open loop (--rate
   transactions a second, sysbench's own arrivals), its connections opened before the verify
   and running through all of it, sysbench printing its figures every second.
3. `knoblab verify production.toml --from FROM --for FOR --window W --settle S --json ...`.
4. Beside each verify window, sysbench's own figures over the same seconds: transactions a
   second, and its 95th percentile latency. Per load: verify's finding, its gain and
   interval, against sysbench's own ratios of A's figures to B's.

FROM is what production_tune.py's tune wrote (a study folder, or a recommended.cnf).
The record goes to LOG (JSON), each load saved as it ends.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from production_tune import production, sysbench

LINE = re.compile(r"\[\s*(\d+)s\s*\].*?tps:\s*([\d.]+).*?lat \(ms,95%\):\s*([\d.]+)")


class Load:
    """sysbench run in the background, its per-second lines stamped with the clock."""

    def __init__(self, command: list[str]) -> None:
        self.seconds: list[tuple[float, float, float]] = []  # (time, tps, p95 ms)
        self.proc = subprocess.Popen(command + ["--report-interval=1"], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            found = LINE.search(line)
            if found:
                self.seconds.append((time.time(), float(found.group(2)),
                                     float(found.group(3))))

    def between(self, start: float, end: float) -> dict[str, float | None]:
        inside = [(tps, p95) for t, tps, p95 in self.seconds if start < t <= end]
        if not inside:
            return {"tps": None, "p95_ms": None}
        return {"tps": statistics.mean(t for t, _ in inside),
                "p95_ms": statistics.median(p for _, p in inside)}

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def verify_once(folder: Path, env: dict[str, str], spec: Path, args: argparse.Namespace,
                load: Load, name: str) -> dict[str, Any]:
    out = folder / f"verify-{name}.json"
    began = time.monotonic()
    subprocess.run([sys.executable, "-m", "knoblab.cli", "--store",
                    f"sqlite:///{folder / 'store.sqlite'}", "verify", str(spec), "--from",
                    args.source, "--for", args.verify_for, "--window", args.window,
                    "--settle", args.settle, "--json", str(out)], env=env, check=True)
    found = json.loads(out.read_text())
    for window in found["windows"]:
        start = found["started_at"] + window["began"]
        window["sysbench"] = load.between(start, start + window["seconds"])
    sides: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
    for window in found["windows"]:
        sides[window["side"]].append(window)

    def mean(side: str, *keys: str) -> float | None:
        values = []
        for w in sides[side]:
            value: Any = w
            for key in keys:
                value = value.get(key) if isinstance(value, dict) else None
            if value is not None:
                values.append(float(value))
        return statistics.mean(values) if values else None

    summary = {"wall_seconds": round(time.monotonic() - began, 1),
               "finding": found["finding"], "gain": found["gain"],
               "interval": found["interval"], "confidence": found["confidence"],
               "pairs": found["pairs"], "stopped": found["stopped"], "said": found["said"],
               "against_claim": found["against_claim"]}
    for label, keys in (("statements_per_s", ("statements_per_s",)),
                        ("latency_ms", ("latency_ms",)),
                        ("digest_latency_ms", ("digest_latency_ms",)),
                        ("sysbench_tps", ("sysbench", "tps")),
                        ("sysbench_p95_ms", ("sysbench", "p95_ms"))):
        a, b = mean("A", *keys), mean("B", *keys)
        summary[label] = {"a": a, "b": b, "a_over_b": None if not a or not b else a / b}
    return {"summary": summary, "verify": found}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", required=True)
    parser.add_argument("--pool", default="32M")
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--table-size", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--rand-type", default="special")
    parser.add_argument("--prepared", action="store_true",
                        help="production's sysbench with server-side prepared statements")
    parser.add_argument("--rate", type=int, default=400,
                        help="the open loop's transactions a second")
    parser.add_argument("--for", dest="verify_for", default="10m")
    parser.add_argument("--window", default="30s")
    parser.add_argument("--settle", default="15s")
    parser.add_argument("--loads", nargs="+", default=["closed", "open"])
    parser.add_argument("--retry", default="1206", help="MariaDB errors on which production's "
                        "sysbench rolls back and runs its transaction again (an application "
                        "that retries: 1206, the lock table full, is what a buffer pool "
                        "shrinking online fails statements with), or 'none'")
    parser.add_argument("--performance-schema", action="store_true",
                        help="production with performance_schema on: verify's statement "
                             "latency as it timed them, beside Little's law's and sysbench's")
    parser.add_argument("--log", type=Path, required=True)
    args = parser.parse_args()
    record: dict[str, Any] = json.loads(args.log.read_text()) if args.log.exists() else {}
    record["args"] = {k: str(v) for k, v in vars(args).items()}
    with tempfile.TemporaryDirectory(prefix="knoblab-verify-") as temporary:
        folder = Path(temporary)
        home = folder / "home"
        home.mkdir()
        env = {**os.environ, "KNOBLAB_HOME": str(home)}
        env.pop("KNOBLAB_STORE", None)
        os.environ["KNOBLAB_HOME"] = str(home)
        with production(folder, home, args) as (socket, spec):
            for name in args.loads:
                if name in record.get("loads", {}):
                    continue
                rate = [f"--rate={args.rate}"] if name == "open" else []
                retry = [] if args.retry == "none" else [f"--mysql-ignore-errors={args.retry}"]
                load = Load(sysbench(socket, args, "run", 3600) + rate + retry)
                try:
                    time.sleep(20)  # the pool open, the load running and warm
                    done = verify_once(folder, env, spec, args, load, name)
                finally:
                    load.stop()
                record.setdefault("loads", {})[name] = done
                args.log.write_text(json.dumps(record, indent=1) + "\n")
                s = done["summary"]
                print(f"{name} loop: {s['said']}")
                for key in ("statements_per_s", "latency_ms", "digest_latency_ms",
                            "sysbench_tps", "sysbench_p95_ms"):
                    got = s[key]
                    print(f"  {key}: A {got['a']}, B {got['b']}, A/B {got['a_over_b']}")


if __name__ == "__main__":
    main()
