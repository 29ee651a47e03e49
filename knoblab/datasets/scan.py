"""The articles' scan table, generated inside the server and kept in a template datadir.

`dt2 (grp INT UNSIGNED NOT NULL, slack VARCHAR(50))`: rows come from a cross join of the
SEQUENCE engine with a 64Ki-row pattern table, which the server copies at about 2M rows/s;
per-row expressions (MD5 and friends) would be four times slower. `slack` is hex text of 20–50
characters, so `slack LIKE 'a%'` matches 1 row in 16 — as in the article (4.7M of 75M).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from knoblab import section
from knoblab.connection import DATABASE, Progress, Server, one
from knoblab.datasets.base import Dataset
from knoblab.errors import UserError
from knoblab.keys import Key, Keys
from knoblab.units import format_size, parse_size

ENGINES = ("MyISAM", "Aria", "InnoDB")
# Engines whose tables do not survive a server start: every measurement would scan nothing.
VOLATILE = {"MEMORY": "a MEMORY table is emptied by every server start, and every measurement "
                      "starts a server"}
SLACK_TYPES = ("VARCHAR(50)", "CHAR(50)")  # the first article's comments ask about CHAR
KEYS = Keys(
    Key("kind", "The built-in table: the articles' dt2 (grp INT UNSIGNED, slack), filled with "
        "a repeating pattern.", "text", '"scan-table"', choices=("scan-table",)),
    Key("rows", "Its rows (not with size); sweepable.", "a whole number"),
    Key("size", "Its size on disk instead of rows (not with rows).", 'a size ("4G")'),
    Key("engine", "Its storage engine, in any case; sweepable (a MEMORY table would not "
        "survive a start).", "text", '"MyISAM"', choices=ENGINES),
    Key("slack_type", "The slack column's type; sweepable.", "text", '"VARCHAR(50)"',
        choices=SLACK_TYPES),
    Key("index", "An index on grp, for index workloads (key cache, range scans).",
        "true or false", "false"),
)
BLOCK = 65536  # rows in the pattern table
BLOCKS_PER_INSERT = 32  # 2M rows per statement: progress without per-statement overhead


def _canonical(written: str, names: tuple[str, ...]) -> str:
    """`written` as the server's canonical name when it is one in another case (or with
    blanks the server ignores); else as written, for the message that refuses it."""
    if not isinstance(written, str):
        return written
    bare = "".join(written.split()).lower()
    return next((n for n in names if n.lower() == bare), written)


@dataclass(frozen=True)
class ScanTable(Dataset):
    """The articles' table, of a given size (rows, or bytes), engine and slack column type."""

    kind: ClassVar[str] = "scan-table"
    named_by: ClassVar[str | None] = None  # the default: [dataset] names no other kind
    parameters: ClassVar[tuple[str, ...]] = ("rows", "engine", "slack_type")

    rows: int | None = None
    size_bytes: int | None = None
    engine: str = "MyISAM"
    table: str = "dt2"
    slack_type: str = "VARCHAR(50)"
    index: bool = False  # an index on grp, for index workloads (key cache, range scans)

    def __post_init__(self) -> None:
        if (self.rows is None) == (self.size_bytes is None):
            raise UserError("[dataset]: give exactly one of rows = N or size = \"500M\"")
        if self.rows is not None and self.rows < 1:
            raise UserError(f"[dataset] rows = {self.rows}: must be at least 1")
        if self.size_bytes is not None and self.size_bytes < 1:
            raise UserError("[dataset] size: must be at least 1 byte")
        # The server reads engine and type names in any case (ENGINE=myisam is MyISAM): so
        # does the spec, storing the canonical name (one template for one dataset).
        engine = _canonical(self.engine, (*ENGINES, *VOLATILE))
        slack = _canonical(self.slack_type, SLACK_TYPES)
        object.__setattr__(self, "engine", engine)  # frozen: set once, here
        object.__setattr__(self, "slack_type", slack)
        if self.engine in VOLATILE:
            raise UserError(f"[dataset] engine = {self.engine!r}: {VOLATILE[self.engine]}; use "
                            f"one of {', '.join(ENGINES)} (to measure in-memory temporary "
                            "tables, sweep tmp_table_size over a GROUP BY instead)")
        if self.engine not in ENGINES:
            raise UserError(f"[dataset] engine = {self.engine!r}: use one of {', '.join(ENGINES)}")
        if self.slack_type not in SLACK_TYPES:
            raise UserError(f"[dataset] slack_type = {self.slack_type!r}: use one of "
                            f"{', '.join(SLACK_TYPES)}")

    @classmethod
    def from_spec(cls, dataset: dict[str, Any], base_dir: Path | None,
                  sweep: Mapping[str, Sequence[Any]] | None = None) -> ScanTable:
        """[dataset] rows or size, engine, slack_type and index; swept rows stand in for the
        size (each point has its own)."""
        sweep = sweep or {}
        if "rows" in sweep:
            if "rows" in dataset or "size" in dataset:
                raise UserError("[sweep] rows: the dataset size is swept; remove rows and size "
                                "from [dataset]")
            first = sweep["rows"][0]
            dataset = {**dataset, "rows": first if isinstance(first, int) else 1}
        if "database" in dataset:
            raise UserError("[dataset] database applies to a dump ([dataset] dump = \"FILE\"); "
                            "the built-in scan table lives in knoblab's own database")
        if dataset.get("kind", cls.kind) != cls.kind:
            raise UserError(f"[dataset] kind = {dataset['kind']!r}: the built-in dataset is "
                            f"\"{cls.kind}\"")
        rows = dataset.get("rows")
        if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int)):
            raise UserError(f"[dataset] rows = {rows!r}: must be a whole number, e.g. 2_000_000")
        size = parse_size(dataset["size"], "[dataset] size") if "size" in dataset else None
        return cls(rows=rows, size_bytes=size,
                   engine=section.text(dataset, "engine", "dataset", "MyISAM"),
                   slack_type=section.text(dataset, "slack_type", "dataset", "VARCHAR(50)"),
                   index=section.flag(dataset, "index", "dataset"))

    def varied(self, requested: Mapping[str, str]) -> ScanTable:
        """The table of a point's swept rows, engine or slack_type."""
        changes: dict[str, Any] = {}
        if "rows" in requested:
            changes.update(rows=int(requested["rows"]), size_bytes=None)
        if "engine" in requested:
            changes["engine"] = requested["engine"]
        if "slack_type" in requested:
            changes["slack_type"] = requested["slack_type"]
        return replace(self, **changes) if changes else self

    @property
    def workload_database(self) -> str:
        return DATABASE

    @property
    def known_databases(self) -> frozenset[str]:
        return frozenset({DATABASE})

    @property
    def key(self) -> str:
        """Names the template datadir holding this dataset (bump v when the data changes)."""
        text = json.dumps({"v": 1, **asdict(self)}, sort_keys=True)
        return "scan-table-" + hashlib.sha256(text.encode()).hexdigest()[:12]

    def build(self, server: Server, progress: Progress | None = None) -> None:
        """Into knoblab's own database on `server` (a plain name: spliced as it is)."""
        conn = server.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE IF NOT EXISTS {server.database}")
                cur.execute(f"USE {server.database}")
                cur.execute(
                    "CREATE TABLE pattern (id INT UNSIGNED NOT NULL, slack VARCHAR(50)) "
                    "ENGINE=MyISAM"
                )
                cur.execute(
                    "INSERT INTO pattern SELECT seq, SUBSTRING(CONCAT(MD5(seq), "
                    f"MD5(seq + {BLOCK})), 1, 20 + seq % 31) FROM seq_0_to_{BLOCK - 1}"
                )
                cur.execute(
                    f"CREATE TABLE {self.table} (grp INT UNSIGNED NOT NULL, "
                    f"slack {self.slack_type}) "
                    f"ENGINE={self.engine} DEFAULT CHARSET=latin1"
                )
                total = self.rows
                done = 0
                if total is None:
                    # Size the table by bytes: load one block, measure bytes per row, extrapolate.
                    assert self.size_bytes is not None  # exactly one of the two is set
                    done = self._insert(cur, 0, BLOCK)
                    per_row = _data_length(cur, server.database, self.table) / done
                    total = max(done, math.ceil(self.size_bytes / per_row))
                while done < total:
                    count = min(total - done, BLOCK * BLOCKS_PER_INSERT)
                    done += self._insert(cur, done, count)
                    if progress:
                        progress(done, total)
                if self.index:
                    cur.execute(f"ALTER TABLE {self.table} ADD INDEX grp (grp)")
                cur.execute("DROP TABLE pattern")
                cur.execute("FLUSH TABLES")
        finally:
            conn.close()

    def _insert(self, cur: Any, first: int, count: int) -> int:
        """Rows first .. first+count-1; grp is the row number, unique."""
        full, rest = divmod(count, BLOCK)
        if full:
            cur.execute(
                f"INSERT INTO {self.table} SELECT {first} + b.seq * {BLOCK} + p.id, p.slack "
                f"FROM seq_0_to_{full - 1} b, pattern p"
            )
        if rest:
            cur.execute(
                f"INSERT INTO {self.table} SELECT {first + full * BLOCK} + p.id, p.slack "
                f"FROM pattern p WHERE p.id < {rest}"
            )
        return count

    def estimated_bytes(self) -> int:
        """Generously, on disk: a row of MyISAM's dt2 takes about 33 bytes (measured), CHAR
        and the page formats of Aria and InnoDB take more, an index on grp about 14 more."""
        per_row = {"MyISAM": 48, "Aria": 64, "InnoDB": 110}[self.engine]
        if self.slack_type.startswith("CHAR"):
            per_row += 24
        if self.index:
            per_row += 24
        if self.rows is not None:
            return self.rows * per_row
        return int((self.size_bytes or 0) * 1.5)

    def files(self, datadir: Path, own: str = DATABASE) -> list[Path]:
        """The table's files in a datadir (what the cold-cache mode evicts)."""
        folder = datadir / own
        return sorted(p for p in folder.glob(f"{self.table}.*") if p.suffix.lower() != ".frm")

    def label(self, then: str = "") -> str:
        """The table in words."""
        size = f"{self.rows:,} rows" if self.rows is not None else \
            f"{format_size(self.size_bytes or 0)}B"
        return f"{self.table} ({size}, {self.engine}, slack {self.slack_type}){then}"

    def describe(self, datadir: Path | None) -> dict[str, object]:
        """What the dataset is; its size on disk when its files are on this machine."""
        info: dict[str, object] = {"kind": self.kind, "engine": self.engine,
                                   "table": self.table, "slack_type": self.slack_type}
        info["rows"] = self.rows
        # None when not found: a running server's [server] database is not knoblab's default
        files = self.files(datadir) if datadir else []
        info["bytes"] = sum(p.stat().st_size for p in files) if files else None
        return info


def parameter_axis(name: str, values: list[Any]) -> list[str]:
    """Swept rows (whole numbers), engine or slack_type (one of the choices)."""
    choices = {"engine": ENGINES, "slack_type": SLACK_TYPES}.get(name)
    axis: list[str] = []
    for raw in values:
        if choices is None:
            if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
                raise UserError(f"[sweep] {name} = {raw!r}: must be whole numbers of at "
                                "least 1")
            value = str(raw)
        else:
            if name == "engine" and str(raw).upper() in VOLATILE:
                ScanTable(rows=1, engine=str(raw).upper())  # refused, saying why
            match = [c for c in choices if isinstance(raw, str) and c.lower() == raw.lower()]
            if not match:
                raise UserError(f"[sweep] {name} = {raw!r}: use one of {', '.join(choices)}")
            value = match[0]
        if value in axis:
            raise UserError(f"[sweep] {name}: {raw} is listed twice; list each value once")
        axis.append(value)
    return axis


def _data_length(cur: Any, database: str, table: str) -> int:
    cur.execute(
        "SELECT DATA_LENGTH FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
        "AND TABLE_NAME = %s", (database, table)
    )
    return int(one(cur)[0])
