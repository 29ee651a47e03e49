"""How fast the SQL-script workload's own client can go: the ceiling above which a body
measures knoblab's Python client rather than the server.

    .venv/bin/python benchmarks/script_client.py --iterations 5000 --repeat 3

A body of `DO 1` costs the server almost nothing, so its rate is the client's limit; a
single-row INSERT in autocommit and in transactions of 100 show where real bodies sit. Each
figure is iterations per second over all connections, median and range of `--repeat` runs on
one sandbox server, with the client's CPU seconds per second of wall time (near the number of
connections on a 2-CPU machine means the client set the pace).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from knoblab.server.binary import find_binary
from knoblab.server.sandbox import Sandbox, derived_template
from knoblab.workloads.script import ScriptWorkload

SETUP = "CREATE TABLE t (id BIGINT PRIMARY KEY, pad VARCHAR(100)) ENGINE=InnoDB"
BODIES = {
    "DO 1 (client only)": ("DO 1", 1),
    "INSERT, autocommit": ("INSERT INTO t VALUES ({row}, REPEAT('x', 80))", 1),
    "INSERT, 100 per commit": ("INSERT INTO t VALUES ({row}, REPEAT('x', 80))", 100),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=5000, help="per connection")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="knoblab-bench-") as home:
        os.environ["KNOBLAB_HOME"] = home
        binary = find_binary()
        print(f"server: {binary.short_version}; {args.iterations:,} iterations per connection, "
              f"{args.repeat} runs each, a fresh table per run")
        for label, (body, transaction) in BODIES.items():
            for connections in args.connections:
                work = ScriptWorkload(setup=SETUP, body=body, connections=connections,
                                      iterations=args.iterations, transaction=transaction)
                data = work.dataset({})
                template = derived_template(binary, data.key, data.build, Path(home))
                rates: list[float] = []
                client: list[float] = []
                for _ in range(args.repeat):
                    with Sandbox(binary, template, {}) as server:
                        measured = work.run_body(server)
                    rates.append(float(measured.details["iterations_per_second"]))  # type: ignore[arg-type]
                    client.append(float(measured.details["client_cpu_seconds"])  # type: ignore[arg-type]
                                  / measured.seconds)
                print(f"{label:24} {connections} conn: {statistics.median(rates):>9,.0f}/s "
                      f"({min(rates):,.0f}–{max(rates):,.0f}); client CPU "
                      f"{statistics.median(client):.2f} s/s")


if __name__ == "__main__":
    main()
