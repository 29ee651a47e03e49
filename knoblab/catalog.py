"""What settings a given server has, and whether a requested value is one it can take.

The catalog is read from a running server (MariaDB: information_schema.SYSTEM_VARIABLES;
MySQL 8: performance_schema.variables_info plus SHOW VARIABLES) and cached as JSON per server
version, so a spec is validated before any experiment starts.
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from knoblab.errors import UserError
from knoblab.units import format_size, parse_size

INTEGER_TYPES = {"INT", "INT UNSIGNED", "BIGINT", "BIGINT UNSIGNED"}

# Settings MariaDB dropped that articles and my.cnf files still recommend. The server only logs
# "was removed" for some of them and starts anyway, so a sweep would measure noise.
REMOVED_IN_MARIADB = {
    "innodb_buffer_pool_instances": "MariaDB has one buffer pool since 10.5 (the setting was "
                                    "ignored from 10.5.1 and removed in 10.6.0)",
    "innodb_page_cleaners": "MariaDB has one page cleaner since 10.5 (the setting was ignored "
                            "from 10.5.1 and removed in 10.6.0)",
    "innodb_log_files_in_group": "MariaDB has a single redo log file since 10.5",
    "innodb_thread_concurrency": "MariaDB no longer has InnoDB thread throttling (10.6 and later)",
    "innodb_additional_mem_pool_size": "InnoDB allocates through the system allocator; the "
                                       "setting was removed in MariaDB 10.2 (and MySQL 5.7.4)",
}


@dataclass(frozen=True)
class Knob:
    name: str
    type: str  # INT, BIGINT UNSIGNED, BOOLEAN, ENUM, SET, FLAGSET, DOUBLE, VARCHAR
    scope: str  # GLOBAL or SESSION (SESSION knobs have a global default too)
    default: str | None
    minimum: int | float | None
    maximum: int | float | None
    block_size: int | None
    choices: tuple[str, ...]
    dynamic: bool  # can be changed with SET GLOBAL on a running server
    startup_option: bool  # can be given in my.cnf / on the command line
    comment: str = ""

    def describe_range(self) -> str:
        if self.type in INTEGER_TYPES and self.minimum is not None and self.maximum is not None:
            return f"{format_size(int(self.minimum))} to {format_size(int(self.maximum))}"
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.minimum is not None and self.maximum is not None:
            return f"{self.minimum:g} to {self.maximum:g}"
        return "any text"

    def default_value(self) -> str | None:
        """The default as the server's config takes it (as listed, when it does not parse)."""
        try:
            return self.normalize(self.default)
        except UserError:
            return self.default

    def normalize(self, raw: Any) -> str:
        """The value as the server's config file takes it; UserError naming the allowed range."""
        where = f"{self.name} = {raw!r}"
        if self.type in INTEGER_TYPES:
            number = _parse_integer(raw, where)
            self._check_range(number, where)
            return str(number)
        if self.type == "DOUBLE":
            try:
                real = float(raw)
            except (TypeError, ValueError):
                raise UserError(f"{where}: not a number; allowed {self.describe_range()}") from None
            if math.isnan(real):
                raise UserError(f"{where}: not a number; allowed {self.describe_range()}")
            self._check_range(real, where)
            return repr(real)
        if self.type == "BOOLEAN":
            text = ("ON" if raw else "OFF") if isinstance(raw, bool) else str(raw).strip().upper()
            if text in {"ON", "1", "TRUE", "YES"}:
                return "ON"
            if text in {"OFF", "0", "FALSE", "NO"}:
                return "OFF"
            raise UserError(f"{where}: expected ON or OFF")
        text = str(raw)
        if any(c in text for c in "\n\r\0"):
            raise UserError(f"{where}: a value cannot contain line breaks")
        if self.type == "ENUM" and self.choices:
            for choice in self.choices:
                if choice.upper() == text.strip().upper():
                    return choice
            raise UserError(f"{where}: allowed {self.describe_range()}")
        if self.type in {"SET", "FLAGSET"} and self.choices:
            allowed = {c.upper() for c in self.choices}
            parts = [p.strip() for p in text.split(",") if p.strip()]
            names = [p.split("=")[0] for p in parts]
            unknown = [n for n in names if n.upper() not in allowed]
            if self.type == "FLAGSET":
                states = ("on", "off", "default")
                bad = [p for p in parts if p.lower() != "default"
                       and ("=" not in p or p.split("=", 1)[1].lower() not in states)]
                if bad:
                    raise UserError(f"{where}: write each flag as name=on, name=off or "
                                    f"name=default (not {', '.join(bad)})")
            if unknown:
                raise UserError(
                    f"{where}: unknown {', '.join(unknown)}; allowed {self.describe_range()}")
        return text

    def _check_range(self, number: float, where: str) -> None:
        low, high = self.minimum, self.maximum
        if (low is not None and number < low) or (high is not None and number > high):
            raise UserError(f"{where}: out of range; {self.name} takes {self.describe_range()}")


@dataclass
class Catalog:
    server_version: str
    knobs: dict[str, Knob]

    def knob(self, name: str) -> Knob:
        """The knob called `name`, or a UserError suggesting the closest real names."""
        key = name.strip().lower().replace("-", "_")
        if key in self.knobs:
            return self.knobs[key]
        close = difflib.get_close_matches(key, list(self.knobs), n=3, cutoff=0.6)
        words = [w for w in key.split("_") if len(w) > 3]
        related = [k for k in self.knobs if all(w in k for w in words[:2])] if words else []
        suggestions = list(dict.fromkeys(close + sorted(related)[:3]))[:4]
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        why = ""
        if key in REMOVED_IN_MARIADB and "mariadb" in self.server_version.lower():
            why = (f": {REMOVED_IN_MARIADB[key]}; to study it, set [server] binary to a MySQL "
                   "server that has it")
        raise UserError(
            f"{name!r} is not a setting of {self.server_version}{why}{hint} "
            f"(list them with: knoblab knobs PATTERN)"
        )

    def matching(self, pattern: str | None) -> list[Knob]:
        needle = (pattern or "").lower().replace("-", "_").replace("%", "")
        return [k for name, k in sorted(self.knobs.items()) if needle in name]

    def save(self, path: Path) -> None:
        knobs = [asdict(k) for k in self.knobs.values()]
        data = {"server_version": self.server_version, "knobs": knobs}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Catalog:
        data = json.loads(path.read_text())
        knobs = {}
        for item in data["knobs"]:
            item["choices"] = tuple(item["choices"])
            knobs[item["name"]] = Knob(**item)
        return cls(data["server_version"], knobs)


def _parse_integer(raw: Any, where: str) -> int:
    """A size or count, possibly negative (the range check then says what is allowed)."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    text = str(raw).strip()
    if text.startswith("-"):
        return -parse_size(text[1:], where)
    return parse_size(text, where)


def _number(value: Any) -> int | float | None:
    """Exact integers (64-bit maxima do not survive a float), else a float, else None."""
    if value is None or value == "":
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        pass
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def read_catalog(conn: Any) -> Catalog:
    """Build the catalog from a live connection (a PyMySQL connection)."""
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        version = cur.fetchone()[0]
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = 'information_schema' AND TABLE_NAME = 'SYSTEM_VARIABLES'"
        )
        if cur.fetchone()[0]:
            return Catalog(version, _read_mariadb(cur))
        return Catalog(version, _read_mysql(cur))


def _read_mariadb(cur: Any) -> dict[str, Knob]:
    cur.execute(
        "SELECT VARIABLE_NAME, VARIABLE_TYPE, VARIABLE_SCOPE, DEFAULT_VALUE, NUMERIC_MIN_VALUE, "
        "NUMERIC_MAX_VALUE, NUMERIC_BLOCK_SIZE, ENUM_VALUE_LIST, READ_ONLY, COMMAND_LINE_ARGUMENT, "
        "VARIABLE_COMMENT FROM information_schema.SYSTEM_VARIABLES"
    )
    knobs = {}
    for (name, vtype, scope, default, low, high, block, enum, read_only, cmdline,
         comment) in cur.fetchall():
        key = name.lower()
        block_size = int(_number(block) or 0) or None
        knobs[key] = Knob(
            name=key, type=vtype, scope=scope, default=default,
            minimum=_number(low), maximum=_number(high), block_size=block_size,
            choices=tuple(enum.split(",")) if enum else (),
            dynamic=read_only == "NO", startup_option=cmdline is not None,
            comment=comment or "",
        )
    return knobs


def _read_mysql(cur: Any) -> dict[str, Knob]:
    """MySQL 8 has ranges in variables_info but no type, default or dynamic flag: infer them."""
    cur.execute("SHOW GLOBAL VARIABLES")
    values = {name.lower(): value for name, value in cur.fetchall()}
    cur.execute("SELECT VARIABLE_NAME, MIN_VALUE, MAX_VALUE FROM performance_schema.variables_info")
    ranges = {name.lower(): (_number(lo), _number(hi)) for name, lo, hi in cur.fetchall()}
    knobs = {}
    for key, value in values.items():
        low, high = ranges.get(key, (None, None))
        is_int = value is not None and value.lstrip("-").isdigit() and (high or 0) > 0
        vtype = "BIGINT" if is_int else ("BOOLEAN" if value in ("ON", "OFF") else "VARCHAR")
        knobs[key] = Knob(
            name=key, type=vtype, scope="GLOBAL", default=None,
            minimum=low if is_int else None, maximum=high if is_int else None, block_size=None,
            choices=("OFF", "ON") if vtype == "BOOLEAN" else (), dynamic=True,
            startup_option=True,
        )
    return knobs
