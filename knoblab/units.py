"""Sizes as MySQL writes them in my.cnf: plain bytes or a K/M/G/T suffix, either case."""

import re
from collections.abc import Mapping

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


def is_size(setting: str) -> bool:
    """Whether a setting's value is a number of bytes (its name says so: the servers name
    their sizes *_size), to be shown as 64K rather than 65536 — and a count as a count."""
    return setting.endswith("_size")


def setting_text(name: str, value: str) -> str:
    """A setting's value for people: sizes as 64K, everything else as the server takes it."""
    return format_size(int(value)) if is_size(name) and value.isdigit() else value


def settings_text(settings: Mapping[str, str]) -> str:
    """"sort_buffer_size=4M, join_cache_level=3", or "the baseline" when there are none."""
    return ", ".join(f"{k}={setting_text(k, v)}" for k, v in settings.items()) or "the baseline"


def format_size(n: int) -> str:
    """The shortest exact K/M/G/T form: 131072 -> "128K", 8200 -> "8200"."""
    for suffix in ("T", "G", "M", "K"):
        unit = _SUFFIX[suffix]
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


_DURATION = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)\s*h)?\s*(?:(\d+(?:\.\d+)?)\s*m)?\s*"
                       r"(?:(\d+(?:\.\d+)?)\s*s?)?\s*$", re.IGNORECASE)


def parse_duration(value: object, what: str = "value") -> float:
    """Seconds in `value` (a number of seconds, "90s", "15m", "2h", "1h30m"); UserError on
    anything else, or on a duration that is not positive."""
    seconds: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and value.strip() and (match := _DURATION.match(value)):
        hours, minutes, plain = (float(g) if g else 0.0 for g in match.groups())
        seconds = hours * 3600 + minutes * 60 + plain
    if seconds is None or not seconds > 0:
        raise UserError(f"{what}: {value!r} is not a duration; write seconds or a number "
                        "with s, m or h (for example 90, \"15m\", \"2h\")")
    return seconds


def format_duration(seconds: float) -> str:
    """"45 s", "15 min", "2 h 5 min"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 120 else f"{minutes // 60} h {minutes % 60} min"
