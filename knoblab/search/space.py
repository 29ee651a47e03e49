"""The settings a search may change, and the values each may take.

Written in a spec as `[tune.knobs]`:

    sort_buffer_size = ["32K", "64M"]          # a range: sizes and counts searched on a log scale
    join_buffer_size = ["128K", "16M"]
    optimizer_search_depth = [0, 62]           # a range of a count
    tmp_table_size = { low = "1M", high = "256M", scale = "linear" }
    innodb_flush_method = ["fsync", "O_DIRECT"]   # text, ON/OFF: the values listed are the choices
    join_buffer_size = { values = ["128K", "256K", "4M"] }   # these values only
    long_query_time = { values = [1, 2.5, 10] }   # fractional settings: the values listed

Each range is checked against the server's own limits (one line naming the allowed range when
it is outside them) and kept on the server's block size, so that the value searched is the value
the server applies (8200 would become 8192 and two trials would be one configuration).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from knoblab import safety
from knoblab.catalog import INTEGER_TYPES, Catalog, Knob
from knoblab.errors import UserError
from knoblab.recommend import never_recommended
from knoblab.records import Dimension, Space
from knoblab.units import format_size, parse_size, setting_text, size_or_count

SCALES = ("log", "linear")


# knobs = "auto": settings known to matter for performance, each over a range wide around
# common practice. The server's own limits and the memory budget narrow them; a setting the
# server lacks is left out; those that give up durability join only with consent.
AUTO: dict[str, Any] = {
    "sort_buffer_size": ["32K", "64M"],
    "join_buffer_size": ["128K", "64M"],
    "read_buffer_size": ["8K", "8M"],
    "read_rnd_buffer_size": ["8K", "16M"],
    "tmp_table_size": ["1M", "1G"],
    "max_heap_table_size": ["1M", "1G"],  # the in-memory temporary table: the smaller of two
    "join_cache_level": {"low": 0, "high": 8, "scale": "linear"},
    "key_buffer_size": ["8M", "4G"],
    "innodb_buffer_pool_size": ["128M", "64G"],
    "innodb_log_file_size": ["48M", "4G"],
    "innodb_io_capacity": ["100", "20000"],
    "innodb_flush_neighbors": {"low": 0, "high": 2, "scale": "linear"},
    "innodb_adaptive_hash_index": ["ON", "OFF"],
    "table_open_cache": ["400", "16384"],
}
AUTO_DURABILITY: dict[str, Any] = {
    "innodb_flush_log_at_trx_commit": {"low": 0, "high": 2, "scale": "linear"},
    "innodb_doublewrite": ["ON", "OFF"],
}
# Shares of the memory budget a single setting may take at most, with every session's
# buffers counted (the safety check still refuses a whole configuration over the budget).
MEMORY_SHARE = {"innodb_buffer_pool_size": 0.5, "key_buffer_size": 0.25,
                "tmp_table_size": 1 / 16, "max_heap_table_size": 1 / 16}
SESSION_SHARE = 1 / 64


def auto_space(catalog: Catalog, memory_budget: int, durability: bool,
               current: Mapping[str, str] | None = None) -> tuple[Space, list[str]]:
    """knobs = "auto" on this server: the space, and a note per setting left out and why.
    A range holds the value in force (`current`: [server.config], e.g. a captured
    production server's), the baseline every trial is measured against."""
    chosen = {**AUTO, **(AUTO_DURABILITY if durability else {})}
    unseen = never_recommended(list(chosen))
    dimensions, left_out = [], []
    for name, entry in chosen.items():
        knob = catalog.knobs.get(name)
        if name in unseen:  # its trials would be paid for, and their finding never used
            left_out.append(f"{name} (never recommended: {unseen[name]})")
            continue
        if knob is None:
            left_out.append(f"{name} (not on this server)")
            continue
        entry = _within(knob, entry, memory_budget, (current or {}).get(name))
        try:
            dimensions.append(_dimension(knob, entry))
        except UserError as exc:
            left_out.append(f"{name} ({str(exc).split(': ', 1)[-1]})")
    if len(dimensions) < 2:
        raise UserError("[tune] knobs = \"auto\": this server has too few of the settings "
                        "knoblab searches by itself; list them in [tune.knobs]")
    return Space(tuple(dimensions)), left_out


def _within(knob: Knob, entry: Any, memory_budget: int, now: str | None = None) -> Any:
    """A range of AUTO narrowed to the server's limits and the memory budget, and widened to
    the value in force (`now`) when that lies outside it."""
    if not isinstance(entry, list) or knob.type not in INTEGER_TYPES:
        return entry
    low, high = (parse_size(v) for v in entry)
    share = MEMORY_SHARE.get(knob.name, SESSION_SHARE if knob.scope == "SESSION" else None)
    if share is not None and knob.name.endswith("_size"):
        high = min(high, int(memory_budget * share))
    if knob.minimum is not None:
        low = max(low, int(knob.minimum))
    if knob.maximum is not None:
        high = min(high, int(knob.maximum))
    high = max(high, low)
    if now is not None:
        with contextlib.suppress(UserError, ValueError):
            value = parse_size(now)
            low, high = min(low, value), max(high, value)
    return [str(low), str(high)]


def parse_space(raw: Any, catalog: Catalog, allow_durability_tradeoff: bool = False) -> Space:
    """[tune.knobs] read against this server's catalog; one line for anything wrong. A setting
    whose values include ones that give up durability is refused first, unless the spec
    allows the trade-off: a search would otherwise spend its trials on refusals."""
    if not isinstance(raw, dict):
        raise UserError(f"[tune] knobs = {raw!r}: name the settings to search in a "
                        "[tune.knobs] table, e.g. sort_buffer_size = [\"32K\", \"64M\"], or "
                        "write knobs = \"auto\"")
    if not raw:
        raise UserError("[tune.knobs] is empty: name at least one setting with its range, e.g. "
                        "sort_buffer_size = [\"32K\", \"64M\"]")
    dimensions = []
    seen: dict[str, str] = {}
    for written, entry in raw.items():
        knob = catalog.knob(written)
        if knob.name in seen:
            raise UserError(f"[tune.knobs] {written!r} and {seen[knob.name]!r} are one setting "
                            f"({knob.name}); name it once")
        seen[knob.name] = written
        if not allow_durability_tradeoff:
            _refuse_unsafe(knob, entry)
        try:
            dimensions.append(_dimension(knob, entry))
        except UserError as exc:  # the catalog's own words say the range, not the section
            text = str(exc)
            raise UserError(text if text.startswith("[tune") else f"[tune.knobs] {text}"
                            ) from None
    # Every dimension holds two values at least (checked below): no space is a single point.
    return Space(tuple(dimensions))


# A range wider than this is checked at its first values and its high end (the durability
# rules single out a few small values).
UNSAFE_SCAN = 4096


def _refuse_unsafe(knob: Knob, entry: Any) -> None:
    """One line naming the values of `entry` that give up durability and the opt-in; the
    entry is read leniently here (its other faults are said after, by _dimension)."""
    if safety.safety_class(knob.name) != "durability":
        return
    costs: dict[str, str] = {}
    values, gap = _values_of(knob, entry)
    for value in values:
        cost = safety.durability_costs({knob.name: value}).get(knob.name)
        if cost:
            costs[value] = cost
    if not costs:
        return
    shown = _listed(knob, list(costs), gap)
    verb = "gives" if len(costs) == 1 else "give"
    raise UserError(f"[tune.knobs] {knob.name}: {shown} {verb} up durability "
                    f"({next(iter(costs.values()))}); search only the safe values, or set "
                    "allow_durability_tradeoff = true in [server] if that trade-off is "
                    "acceptable")


def _values_of(knob: Knob, entry: Any) -> tuple[list[str], tuple[int, int] | None]:
    """The values an entry of [tune.knobs] stands for, as the server takes them (those that
    do not read are left out); and, for a range too wide to scan, the two values between
    which it was not (the values there are taken to be like those at both ends)."""
    def normal(raw: Any) -> str | None:
        try:
            return knob.normalize(raw)
        except UserError:
            return None

    if isinstance(entry, dict) and "values" in entry:
        listed = entry["values"] if isinstance(entry["values"], list) else []
    elif knob.type in INTEGER_TYPES and isinstance(entry, dict | list):
        bounds = [entry.get("low"), entry.get("high")] if isinstance(entry, dict) else entry
        ends = [e for e in (normal(b) for b in bounds) if e is not None]
        if len(bounds) != 2 or len(ends) != 2:  # not a range: the values given
            return ends, None
        low, high = sorted(int(e) for e in ends)
        step = knob.block_size or 1
        numbers = range(low, min(high, low + (UNSAFE_SCAN - 1) * step) + 1, step)
        gap = (numbers[-1], high) if high - numbers[-1] > step else None
        return [str(n) for n in dict.fromkeys([*numbers, high])], gap
    else:
        listed = entry if isinstance(entry, list) else []
    return [v for v in (normal(raw) for raw in listed) if v is not None], None


def _listed(knob: Knob, values: list[str], gap: tuple[int, int] | None = None) -> str:
    """"0 and 2", "2 to 1000", "0, 2 and 5 to 9": runs of three or more whole numbers
    joined."""
    parts: list[str] = []
    if all(v.lstrip("-").isdigit() for v in values):
        numbers = sorted(int(v) for v in values)
        step = knob.block_size or 1
        start = previous = numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and (n - previous == step or (previous, n) == gap):
                previous = n
                continue
            if previous - start > step or (start, previous) == gap:
                parts.append(f"{setting_text(knob.name, str(start))} to "
                             f"{setting_text(knob.name, str(previous))}")
            else:
                parts += [setting_text(knob.name, str(x)) for x in dict.fromkeys([start,
                                                                                  previous])]
            if n is not None:
                start = previous = n
    else:
        parts = values
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _dimension(knob: Knob, entry: Any) -> Dimension:
    where = f"[tune.knobs] {knob.name}"
    if isinstance(entry, dict) and set(entry) == {"values"}:
        # These values only, of any type: { values = ["2M", "16M", "64M"] }.
        return _choices(knob, entry["values"], where)
    if knob.type in INTEGER_TYPES:
        low, high, scale = _range(entry, where)
        return _integer_range(knob, low, high, scale, where)
    if knob.type == "DOUBLE":
        # The search's parameters are whole numbers or choices: a fractional setting is
        # searched over the values listed (each checked against the server's limits).
        listed = [entry.get("low"), entry.get("high")] if isinstance(entry, dict) else entry
        example = ", ".join(str(v) for v in listed if isinstance(v, int | float)) \
            if isinstance(listed, list) else ""
        raise UserError(f"{where} takes fractional values, which are searched over the "
                        "values listed, not over a range: write { values = ["
                        f"{example or '1, 2.5, 10'}] }} with the values to try (at least two)")
    if not isinstance(entry, list) or len(entry) < 2:
        raise UserError(f"{where} = {entry!r}: list the values to try (at least two), e.g. "
                        f"[{', '.join(repr(c) for c in (knob.choices or ('ON', 'OFF'))[:2])}]")
    return _choices(knob, entry, where)


def _choices(knob: Knob, entry: Any, where: str) -> Dimension:
    if not isinstance(entry, list) or len(entry) < 2:
        raise UserError(f"{where}: list the values to try (at least two)")
    values = []
    for raw in entry:
        value = knob.normalize(raw)
        if value in values:
            raise UserError(f"{where}: {raw!r} is listed twice (as the server takes it: "
                            f"{value}); list each value once")
        values.append(value)
    return Dimension(knob.name, choices=tuple(values))


def _range(entry: Any, where: str) -> tuple[Any, Any, str]:
    if isinstance(entry, dict):
        unknown = set(entry) - {"low", "high", "scale"}
        if unknown or "low" not in entry or "high" not in entry:
            raise UserError(f"{where} = {entry!r}: write {{ low = ..., high = ... }} with an "
                            "optional scale = \"log\" or \"linear\"")
        scale = entry.get("scale", "log")
        if scale not in SCALES:
            raise UserError(f"{where}: scale = {scale!r}: use \"log\" or \"linear\"")
        return entry["low"], entry["high"], scale
    if isinstance(entry, list) and len(entry) == 2:
        return entry[0], entry[1], "log"
    raise UserError(f"{where} = {entry!r}: give a range as [low, high], e.g. [\"32K\", \"64M\"]")


def _integer_range(knob: Knob, raw_low: Any, raw_high: Any, scale: str,
                   where: str) -> Dimension:
    # normalize() checks each bound against the server's limits, naming them.
    low, high = int(knob.normalize(raw_low)), int(knob.normalize(raw_high))
    if low >= high:
        raise UserError(f"{where}: the range {raw_low!r} to {raw_high!r} is empty; the low end "
                        "must be below the high end")
    step = knob.block_size or 1
    # On the block size, inside the range: the server would round anything else.
    aligned_low = -(-low // step) * step
    aligned_high = high // step * step
    if aligned_low >= aligned_high:
        raise UserError(f"{where}: {raw_low!r} to {raw_high!r} holds one value on the server's "
                        f"block size of {format_size(step)}; widen it")
    log = scale == "log"
    if log and aligned_low <= 0:
        raise UserError(f"{where}: a log scale needs a low end above 0; start the range at "
                        f"{size_or_count(step)} or set scale = \"linear\"")
    dimension = Dimension(knob.name, aligned_low, aligned_high, step, log)
    if dimension.value(aligned_low) == dimension.value(aligned_high):
        # Sizes on a log scale land on quarter powers of two: a narrow range may hold one.
        one = size_or_count(int(dimension.value(aligned_low)))
        raise UserError(f"{where}: {raw_low!r} to {raw_high!r} holds one value ({one}) at the "
                        "quarter powers of two a search of sizes takes on a log scale; widen "
                        "it, or set scale = \"linear\"")
    return dimension

