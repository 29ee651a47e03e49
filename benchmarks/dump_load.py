"""How fast knoblab loads a dump ([dataset] dump), against `mariadb < dump.sql` on the same file.

    .venv/bin/python benchmarks/dump_load.py --rows 2000000 --repetitions 5
    .venv/bin/python benchmarks/dump_load.py --dump /path/to/your.sql.gz

Without --dump it writes a dump of one InnoDB table (sysbench's shape: id, k, c, pad) as
mariadb-dump --databases would (extended INSERTs of about 1 MB, keys disabled, unique and
foreign-key checks off), compressed as --compression says. Each repetition loads it twice into
fresh sandboxes copied from the same empty template, alternating which goes first: once by
knoblab (`Dump.load`: the file read and decompressed in Python, fed to the mariadb client in
1 MiB chunks, its DEFINERs and databases seen to on the way) and once by the client alone
reading the file on its stdin (through `gzip -dc` or `zstd -dc` for a compressed file). Only
the load is timed (the sandbox is started before the clock). It prints each time, the
medians, knoblab's rate in MB/s of dump text, and knoblab's time over the client's.
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from knoblab.datasets.dump import Dump
from knoblab.server.binary import ServerBinary, find_binary
from knoblab.server.sandbox import Sandbox, base_template

HEADER = """\
-- MariaDB dump (written by benchmarks/dump_load.py)
/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */;
/*!40101 SET NAMES utf8mb4 */;
/*!40014 SET @OLD_UNIQUE_CHECKS=@@UNIQUE_CHECKS, UNIQUE_CHECKS=0 */;
/*!40014 SET @OLD_FOREIGN_KEY_CHECKS=@@FOREIGN_KEY_CHECKS, FOREIGN_KEY_CHECKS=0 */;
/*!40101 SET @OLD_SQL_MODE=@@SQL_MODE, SQL_MODE='NO_AUTO_VALUE_ON_ZERO' */;

CREATE DATABASE /*!32312 IF NOT EXISTS*/ `bench` /*!40100 DEFAULT CHARACTER SET utf8mb4 */;
USE `bench`;
DROP TABLE IF EXISTS `sbtest1`;
CREATE TABLE `sbtest1` (
  `id` int(11) NOT NULL,
  `k` int(11) NOT NULL DEFAULT 0,
  `c` char(120) NOT NULL DEFAULT '',
  `pad` char(60) NOT NULL DEFAULT '',
  PRIMARY KEY (`id`),
  KEY `k_1` (`k`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

LOCK TABLES `sbtest1` WRITE;
/*!40000 ALTER TABLE `sbtest1` DISABLE KEYS */;
"""
FOOTER = """\
/*!40000 ALTER TABLE `sbtest1` ENABLE KEYS */;
UNLOCK TABLES;
/*!40014 SET FOREIGN_KEY_CHECKS=@OLD_FOREIGN_KEY_CHECKS */;
/*!40014 SET UNIQUE_CHECKS=@OLD_UNIQUE_CHECKS */;
-- Dump completed
"""
STATEMENT_BYTES = 1 << 20  # mariadb-dump's default net_buffer_length-sized INSERTs


def _digits(draw: random.Random, groups: int) -> str:
    return "-".join(f"{draw.randrange(10**11):011d}" for _ in range(groups))


def write_dump(path: Path, rows: int, compression: str) -> None:
    draw = random.Random(1)
    opener = {"none": open, "gzip": gzip.open}.get(compression)
    target = path.with_suffix("") if compression == "zstd" else path
    with (opener or open)(target, "wt", encoding="utf-8") as out:  # type: ignore[operator]
        out.write(HEADER)
        values: list[str] = []
        size = 0
        for row in range(1, rows + 1):
            value = (f"({row},{draw.randrange(rows)},'{_digits(draw, 10)}',"
                     f"'{_digits(draw, 5)}')")
            values.append(value)
            size += len(value) + 1
            if size >= STATEMENT_BYTES or row == rows:
                out.write("INSERT INTO `sbtest1` VALUES " + ",".join(values) + ";\n")
                values, size = [], 0
        out.write(FOOTER)
    if compression == "zstd":
        subprocess.run(["zstd", "-q", "-f", "--rm", str(target), "-o", str(path)], check=True)


def load_knoblab(binary: ServerBinary, base: Path, home: Path, dump: Dump) -> float:
    with Sandbox(binary, base, {}, home=home) as server:
        began = time.perf_counter()
        dump.load(server)
        return time.perf_counter() - began


def load_client(binary: ServerBinary, base: Path, home: Path, path: Path,
                compression: str) -> float:
    client = shutil.which("mariadb") or shutil.which("mysql")
    assert client, "needs the mariadb client"
    with Sandbox(binary, base, {}, home=home) as server:
        argv = [client, "--no-defaults", f"--socket={server.socket}", "--user=root",
                "--max-allowed-packet=1073741824", "--default-character-set=utf8mb4"]
        began = time.perf_counter()
        with open(path, "rb") as source:
            if compression == "none":
                subprocess.run(argv, stdin=source, check=True)
            else:
                unpack = subprocess.Popen(
                    ["gzip" if compression == "gzip" else "zstd", "-dc"], stdin=source,
                    stdout=subprocess.PIPE)
                subprocess.run(argv, stdin=unpack.stdout, check=True)
                assert unpack.stdout is not None
                unpack.stdout.close()
                unpack.wait()
        return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--compression", choices=("none", "gzip", "zstd"), default="none")
    parser.add_argument("--dump", type=Path, help="a dump of your own (made with --databases)")
    parser.add_argument("--repetitions", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="knoblab-bench-") as folder:
        home = Path(folder) / "home"
        os.environ["KNOBLAB_HOME"] = str(home)
        binary = find_binary()
        base = base_template(binary, home) / "data"
        path = args.dump
        if path is None:
            path = Path(folder) / {"none": "bench.sql", "gzip": "bench.sql.gz",
                                   "zstd": "bench.sql.zst"}[args.compression]
            write_dump(path, args.rows, args.compression)
        dump = Dump.from_spec({"dump": str(path.resolve())}, None)
        text = dump.text_bytes()
        print(f"server: {binary.short_version}; dump {path.name}: {path.stat().st_size / 1e6:,.1f}"
              f" MB ({dump.compression}), text {text / 1e6:,.1f} MB")
        times: dict[str, list[float]] = {"knoblab": [], "client": []}
        for repetition in range(args.repetitions):
            order = ["knoblab", "client"] if repetition % 2 == 0 else ["client", "knoblab"]
            for who in order:
                seconds = load_knoblab(binary, base, home, dump) if who == "knoblab" else \
                    load_client(binary, base, home, path, dump.compression)
                times[who].append(seconds)
                print(f"  #{repetition + 1} {who:<8} {seconds:8.2f} s")
    ours, theirs = (statistics.median(times[w]) for w in ("knoblab", "client"))
    print(f"median: knoblab {ours:.2f} s ({text / ours / 1e6:.1f} MB/s of text), "
          f"mariadb < dump {theirs:.2f} s ({text / theirs / 1e6:.1f} MB/s); "
          f"knoblab / client = {ours / theirs:.3f}")


if __name__ == "__main__":
    main()
