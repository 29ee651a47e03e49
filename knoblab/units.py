"""Sizes as MySQL writes them in my.cnf: plain bytes or a K/M/G/T suffix, either case."""

import math
import re
from collections.abc import Mapping

from knoblab.errors import UserError

_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# No server setting holds more than 64 bits: anything larger is a typo, refused where it is read.
MAX_SIZE = 2**64 - 1
# The longest duration knoblab takes (a budget, a timeout): longer is a typo or `inf`, and
# would overflow the clock arithmetic long after the run started.
MAX_DURATION = 366 * 24 * 3600.0
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)B?\s*$", re.IGNORECASE)


def parse_size(value: object, what: str = "value") -> int:
    """Bytes in `value` (int, "8200", "128K", "32m", "1G"); UserError on anything else."""
    if isinstance(value, bool):
        raise UserError(f"{what}: expected a size such as 8200, 128K or 32M, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise UserError(f"{what}: a size cannot be negative ({value})")
        return _bounded_size(value, value, what)
    match = _SIZE.match(str(value))
    if not match:
        raise UserError(
            f"{what}: {value!r} is not a size; write bytes or a number with K, M, G or T "
            "(for example 8200, 128K, 32M)"
        )
    return _bounded_size(int(match.group(1)) * _SUFFIX[match.group(2).upper()], value, what)


def _bounded_size(size: int, written: object, what: str) -> int:
    if size > MAX_SIZE:
        raise UserError(f"{what}: {_clipped(written)} is larger than any server setting "
                        f"holds (at most {MAX_SIZE}, 16 exbibytes); check the number")
    return size


def _clipped(value: object) -> str:
    """A value quoted in a message, cut short when absurdly long."""
    try:
        text = repr(value)
    except ValueError:  # an integer of thousands of digits
        return "a number of thousands of digits"
    return text if len(text) <= 40 else text[:37] + "..."


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
    anything else, or on a duration that is not positive and finite, or longer than a year
    (MAX_DURATION)."""
    seconds: float | None = None
    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            seconds = float(value)
        elif isinstance(value, str) and value.strip() and (match := _DURATION.match(value)):
            hours, minutes, plain = (float(g) if g else 0.0 for g in match.groups())
            seconds = hours * 3600 + minutes * 60 + plain
    except OverflowError:  # an integer too large for a float
        seconds = math.inf
    if seconds is None or not seconds > 0:
        raise UserError(f"{what}: {_clipped(value)} is not a duration; write seconds or a "
                        "number with s, m or h (for example 90, \"15m\", \"2h\")")
    if not seconds <= MAX_DURATION:  # also inf
        raise UserError(f"{what}: {_clipped(value)} is longer than knoblab takes (at most "
                        f"{MAX_DURATION / 86400:.0f} days); give a finite duration such as "
                        "\"15m\" or \"2h\"")
    return seconds


def format_duration(seconds: float) -> str:
    """"45 s", "15 min", "2 h 5 min"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 120 else f"{minutes // 60} h {minutes % 60} min"


def size_or_count(n: int) -> str:
    """A whole number as a size when it is one of at least 1K (1048576 -> 1M), else as is."""
    return format_size(n) if n >= 1024 else str(n)


def plural(count: int, noun: str, many: str | None = None) -> str:
    """"1 measurement", "3 measurements" (`many`: a plural not made with "s")."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"


def threads_text(threads: object) -> str:
    """"1 thread", "8 threads"; "? threads" when not said."""
    return plural(threads, "thread") if isinstance(threads, int) else f"{threads or '?'} threads"


def num(x: float | None) -> str:
    """3 significant digits, never scientific, never fewer digits than the integer part, and
    thousands separated ("1,204"); "—" for no number."""
    if x is None:
        return "—"
    if x == 0 or not math.isfinite(x):
        return f"{x:.2f}" if x == 0 else str(x)
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    decimals = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:.{decimals}f}"
