"""How fast a captured log is read and fingerprinted, and which SQL tokenizer to do it with.

    .venv/bin/python benchmarks/capture_tokenizers.py --statements 20000

On a log of many small statements (sysbench's point selects, ranges, updates and inserts, with
varied literals) it reports statements per second for: sqlglot's MySQL tokenizer (compiled by
sqlglotc when installed, else pure Python), sqlparse's lexer, one regular expression that only
splits (a floor: it understands nothing), knoblab's whole fingerprint, and the reader over a
slow log of those statements, written to a temporary file.
"""

from __future__ import annotations

import argparse
import importlib
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from knoblab.capture import fingerprint, read_log


def statements(count: int, seed: int = 1) -> list[str]:
    draw = random.Random(seed)
    made = []
    for index in range(count):
        shape = index % 4
        if shape == 0:
            made.append(f"SELECT c FROM sbtest1 WHERE id={draw.randint(1, 10**6)}")
        elif shape == 1:
            made.append(f"SELECT c FROM sbtest1 WHERE id BETWEEN {index} AND {index + 99} "
                        "ORDER BY c")
        elif shape == 2:
            made.append(f"UPDATE sbtest1 SET k=k+1 WHERE id={index}")
        else:
            made.append(f"INSERT INTO sbtest1 (id, k, c, pad) VALUES ({index}, {index * 7}, "
                        f"'{index:011d}-abc-def', 'xyz-{index}')")
    return made


def rate(name: str, work: Callable[[str], object], texts: list[str]) -> None:
    began = time.perf_counter()
    for text in texts:
        work(text)
    took = time.perf_counter() - began
    print(f"{name:<40} {len(texts) / took:>10,.0f} statements/s  "
          f"({took * 1e6 / len(texts):.1f} µs each)")


def slow_log(texts: list[str], folder: Path) -> Path:
    path = folder / "slow.log"
    with path.open("w") as out:
        for index, text in enumerate(texts):
            out.write(f"# User@Host: sbtest[sbtest] @ localhost []\n"
                      f"# Thread_id: {index % 8 + 1}  Schema: sbtest  QC_hit: No\n"
                      "# Query_time: 0.000050  Lock_time: 0.000010  Rows_sent: 1  "
                      "Rows_examined: 1\n# Rows_affected: 0  Bytes_sent: 60\n"
                      f"SET timestamp={1_700_000_000 + index // 1000};\n{text};\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--statements", type=int, default=20_000)
    args = parser.parse_args()
    texts = statements(args.statements)

    import sqlglot.tokens
    from sqlglot.dialects.mysql import MySQL
    compiled = sqlglot.tokens.SQLGLOTC_INSTALLED
    tokenizer = MySQL().tokenizer()
    rate(f"sqlglot MySQL tokenizer ({'sqlglotc' if compiled else 'pure Python'})",
         tokenizer.tokenize, texts)
    try:  # optional: not one of knoblab's dependencies
        lexer = importlib.import_module("sqlparse.lexer")
    except ImportError:
        print("sqlparse: not installed")
    else:
        sqlparse_lexer = lexer.Lexer.get_default_instance()
        rate("sqlparse lexer", lambda text: list(sqlparse_lexer.get_tokens(text)), texts)
    import re
    splitter = re.compile(r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.)*\"|`[^`]*`|/\*.*?\*/"
                          r"|--[^\n]*|#[^\n]*|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\w+|\S", re.S)
    rate("one regular expression (splits only)", splitter.findall, texts)
    rate("knoblab fingerprint", fingerprint, texts)
    with tempfile.TemporaryDirectory(prefix="knoblab-bench-") as folder:
        path = slow_log(texts, Path(folder))
        began = time.perf_counter()
        count = sum(1 for _ in read_log(path))
        took = time.perf_counter() - began
        size = path.stat().st_size
        print(f"{'knoblab slow log reader':<40} {count / took:>10,.0f} events/s  "
              f"({size / took / 1e6:.1f} MB/s)")


if __name__ == "__main__":
    main()
