"""Writes a captured log of a small shop's load: the log of examples/replay-shop.toml, made
here on a sandbox so that no third-party data is needed.

    .venv/bin/python scripts/shop_dump.py examples/shop.sql.gz
    .venv/bin/python scripts/shop_capture.py examples/shop.sql.gz examples/shop-slow.log \
        [--sessions 4] [--statements 100] [--writes] [--general]

The dump is loaded into a sandbox started with the slow query log at long_query_time = 0
(or, with --general, the general log); SESSIONS client connections then run a fixed mix —
customer lookups, a customer's latest orders, best sellers of the last month (which reads the
clock), country revenue through the dump's view and, with --writes, orders placed through its
stored procedure — each STATEMENTS statements, drawn from a fixed seed. The server's log is
copied to the output. The log holds the statements' literals: here they are made up.

The default log is short on purpose: under the example's innodb_buffer_pool_size = 16M each
country-revenue statement reads some 25,000 pages from disk (InnoDB bypasses the OS cache), so
a replay there takes about a minute for the default's 400 statements, and the example's run
grows with the log in proportion.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from knoblab.datasets.dump import Dump  # noqa: E402
from knoblab.server.binary import find_binary  # noqa: E402
from knoblab.server.sandbox import Sandbox, derived_template  # noqa: E402

READS = (
    (6, "SELECT name, country FROM customers WHERE id = {customer}"),
    (3, "SELECT id, product, quantity, placed FROM orders WHERE customer = {customer} "
        "ORDER BY placed DESC LIMIT 10"),
    (1, "SELECT p.title, SUM(o.quantity) AS sold FROM orders o JOIN products p "
        "ON p.id = o.product WHERE o.placed >= NOW() - INTERVAL 30 DAY "
        "AND o.customer BETWEEN {customer} AND {customer} + 200 "
        "GROUP BY p.id ORDER BY sold DESC LIMIT 5"),
    (1, "SELECT country, revenue FROM revenue_by_country WHERE country = '{country}'"),
)
WRITE = (2, "CALL place_order({customer}, {product}, {quantity})")
COUNTRIES = ("DE", "FR", "FI", "SE", "US", "GB", "ES", "IT", "PL", "NL")


def session(server: Sandbox, number: int, statements: int, writes: bool,
            customers: int) -> None:
    draw = random.Random(number)
    mix = [*READS, *([WRITE] if writes else [])]
    weights = [w for w, _ in mix]
    conn = server.connect("shop")
    try:
        with conn.cursor() as cur:
            for _ in range(statements):
                (_, text), = draw.choices(mix, weights)
                cur.execute(text.format(customer=draw.randint(1, customers),
                                        product=draw.randint(1, 500),
                                        quantity=draw.randint(1, 5),
                                        country=draw.choice(COUNTRIES)))
                cur.fetchall()
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dump", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--statements", type=int, default=100, help="per session")
    parser.add_argument("--writes", action="store_true")
    parser.add_argument("--general", action="store_true", help="the general log instead")
    args = parser.parse_args()
    binary = find_binary()
    dump = Dump.from_spec({"dump": str(args.dump.resolve())}, None)
    template = derived_template(binary, dump.key, lambda s: dump.build(s, lambda d, t: None),
                                estimated_bytes=dump.estimated_bytes())
    log = "general.log" if args.general else "slow.log"
    settings = {"general_log": "1", "general_log_file": log} if args.general else \
        {"slow_query_log": "1", "long_query_time": "0", "slow_query_log_file": log}
    with Sandbox(binary, template, settings) as server:
        with server.connect("shop") as conn, conn.cursor() as cur:
            # This lookup is the script's, not the shop's load: kept out of the log.
            cur.execute("SET SESSION long_query_time = 3600")
            cur.execute("SELECT MAX(id) FROM customers")
            (customers,) = cur.fetchone() or (1,)
        threads = [threading.Thread(target=session, args=(server, n, args.statements,
                                                          args.writes, customers))
                   for n in range(1, args.sessions + 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        time.sleep(0.5)  # the slow log writes an entry after its client has the answer
        assert server.datadir is not None
        shutil.copy(server.datadir / log, args.out)
    print(f"{args.out}: {args.out.stat().st_size / 1e6:.1f} MB, {args.sessions} sessions of "
          f"{args.statements} statements")


if __name__ == "__main__":
    main()
