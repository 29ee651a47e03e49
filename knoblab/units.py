"""Sizes as MySQL writes them in my.cnf: plain bytes or a K/M/G/T suffix, either case."""

import re

from knoblab.errors import UserError

_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)B?\s*$", re.IGNORECASE)


def parse_size(value: object, what: str = "value") -> int:
    """Bytes in `value` (int, "8200", "128K", "32m", "1G"); UserError on anything else."""
    if isinstance(value, bool):
        raise UserError(f"{what}: expected a size such as 8200, 128K or 32M, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise UserError(f"{what}: a size cannot be negative ({value})")
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise UserError(
            f"{what}: {value!r} is not a size; write bytes or a number with K, M, G or T "
            "(for example 8200, 128K, 32M)"
        )
    return int(match.group(1)) * _SUFFIX[match.group(2).upper()]


def format_size(n: int) -> str:
    """The shortest exact K/M/G/T form: 131072 -> "128K", 8200 -> "8200"."""
    for suffix in ("T", "G", "M", "K"):
        unit = _SUFFIX[suffix]
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)
