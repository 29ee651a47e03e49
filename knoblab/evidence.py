"""Which server counters explain a result: SHOW GLOBAL STATUS deltas that moved with the setting.

Pure functions, no I/O.

Why eta² and spread rather than a fixed list: the counter that explains a win depends on the
workload (temporary tables for a GROUP BY, buffer pool reads for a scan, log writes for commits).
A counter explains a sweep when it is the same run after run at one point (eta², the share of
its variance the point explains, near 1) and clearly different between points (spread), so it
is computed from the data.

Why eta² and rank correlation do not rank: with two points every counter that changed at all
has eta² near 1 and |rho| = 1, so they only filter. What ranks is the size of the change per
unit of work (pages, events; bytes counted in 16 KiB pages), a cost's weighted far above the
rest (COST_WEIGHT): a read from disk, a page written, a temporary table on disk, a sort merge
pass, a lock wait or an fsync is slow work the server had to do, while other counters mostly
describe work done in memory.

Counters, levels and positions (`kind_of`, the one place this is decided): SHOW GLOBAL STATUS
mixes counters (grow with the work done: a delta per unit of work means something) with levels
(the state at a moment: pages free, checkpoint age, threads running) and positions (an LSN, a
transaction id: a point on an ever-growing axis whose delta duplicates a counter, e.g.
innodb_os_log_written, and whose value means nothing). A level's delta divided by work is
nonsense (it can be negative); a level is shown as the level it had, never per unit. Names
decide first; behaviour second: a "counter" that went down during a measurement is a level.

Capacities (`kind_of` "capacity"): a figure whose name says it is how much there is room for —
a size, a total, a maximum, a limit, the cells of a hash table sized from the pool
(innodb_buffer_pool_pages_total, innodb_page_size, innodb_checkpoint_max_age) — is set by the
configuration. It restates the setting under test, so it never explains a difference. MariaDB's
Innodb_ibuf_size and Innodb_ibuf_segment_size are of this kind twice over: the server reads
two 32-bit fields of its change buffer as one 64-bit number, so the upper half holds the
buffer's maximum size (a quarter of the pool's pages: 2028 x 2^32 + 1 = 8.7e12 at a 128M pool)
and the figure is the pool's size, in disguise.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

# Counters that move with elapsed time, with the amount of traffic (a fixed-time run's own
# throughput, so "explaining" it is circular), with connection churn, or with knoblab's own
# probing (SHOW STATUS/VARIABLES, SET, ping) rather than with the setting under test.
DEFAULT_IGNORE: frozenset[str] = frozenset({
    "uptime", "uptime_since_flush_status", "questions", "queries", "bytes_sent", "bytes_received",
    "com_show_status", "com_show_variables", "com_show_engine_status", "com_show_processlist",
    "com_set_option", "com_admin_commands", "connections", "threads_created", "threads_connected",
    "threads_running", "threads_cached", "max_used_connections", "aborted_connects",
    "aborted_clients", "memory_used", "memory_used_initial", "last_query_cost", "busy_time",
    "cpu_time",
})
# Clocks by another name: the server's own query time (the metric itself) and background threads
# that tick once a second. They "explain" every slower run and say nothing about why.
CLOCK_LIKE = re.compile(r"_time$|_loops$|^innodb_background_log_sync$")

# Levels: a state, not an amount of work. MariaDB's names, checked against SHOW GLOBAL STATUS
# of 10.6-11.x; what is not matched here and never goes down is taken as a counter.
LEVELS = re.compile(
    r"^innodb_buffer_pool_pages_(data|dirty|free|misc|total|old|latched)$"
    r"|^innodb_buffer_pool_bytes_(data|dirty)$|^innodb_buffer_pool_(load|dump|resize)_"
    r"|^innodb_checkpoint_(age|max_age)$|^innodb_history_list_length$"
    r"|^innodb_mem_|^innodb_ibuf_free_list$|^innodb_num_open_files$"
    r"|^innodb_adaptive_hash_(cells|heap_buffers)$|^innodb_page_size$|^innodb_have_"
    r"|_pending($|_)|_current($|_)|^innodb_row_lock_time_(avg|max)$"
    r"|^threads_(connected|running|cached)$|^open_|^max_used_|^memory_used|_max_memory"
    r"|^key_blocks_(unused|used|not_flushed)$"
    r"|^qcache_(free_blocks|free_memory|queries_in_cache|total_blocks)$"
    r"|^prepared_stmt_count$|^slave_open_temp_tables$|^tc_log_(page_size|max_pages_used)$"
    r"|^last_query_cost$|^innodb_encryption_.*(pages|keys)$|^innodb_dict_tables$"
    r"|^rpl_semi_sync_.*_clients$|^feature_|^wsrep_"
)
# Capacities: how much there is room for, set by the configuration (see the docstring). Names,
# not values: a capacity is as constant within a point as a real level can be.
CAPACITIES = re.compile(
    r"_size$|_total$|_max_age$|_limit$|^innodb_adaptive_hash_cells$"
)
# Positions: a point on an axis that only grows (log sequence numbers, transaction ids).
POSITIONS = re.compile(r"^innodb_lsn_|^innodb_max_trx_id$|^innodb_purge_(trx_id|undo_no)$"
                       r"|_position$|_pos$")
# Costs: work the server had to do because of its configuration: reads from disk, pages
# written, temporary tables and files on disk, sort merge passes, lock and log waits, fsyncs.
COSTS = re.compile(
    r"^innodb_buffer_pool_reads$|^innodb_data_reads?$|^innodb_pages_read$|^key_reads$"
    r"|^aria_pagecache_reads$|^innodb_buffer_pool_wait_free$"
    r"|^innodb_pages_written$|^innodb_data_writes$|^innodb_data_written$|^key_writes$"
    r"|^innodb_buffer_pool_pages_(lru_)?flushed$|^aria_pagecache_writes$|^innodb_dblwr_"
    r"|^innodb_os_log_written$|^innodb_log_writes$|^innodb_log_waits$"
    r"|^created_tmp_disk_tables$|^created_tmp_files$|^sort_merge_passes$"
    r"|^innodb_row_lock_waits$|^table_locks_waited$|^innodb_deadlocks$"
    r"|_fsyncs$|^binlog_(cache|stmt_cache)_disk_use$"
)
PAGE_BYTES = 16384  # byte volumes are ranked in InnoDB pages, beside the page counters
# A read from disk, a page written or an fsync takes ~100 µs, an operation in memory (a row
# read, a query cache insert) ~0.1 µs: a cost's change counts a thousand times, so 22 reads
# per transaction outrank 38 pages made young, while a few reads over a whole run (a warm-up
# remnant, 0.0002 per transaction) do not outrank a query cache that starts taking inserts.
COST_WEIGHT = 1000.0

_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_BYTE_FAMILIES = ("innodb_data_", "innodb_os_log_")  # their _read/_written count bytes, not pages


def _number(text: object) -> int | float | None:
    s = str(text).strip()
    if not _NUMBER.fullmatch(s):
        return None  # "ON", "OFF", "", dates, versions
    if s.lstrip("+-").isdigit():
        return int(s)  # exact: 64-bit counters lose digits as floats before subtracting
    value = float(s)
    return value if math.isfinite(value) else None


def status_delta(before: Mapping[str, str], after: Mapping[str, str]) -> dict[str, float]:
    """after - before of every numeric status value present in both; names lower-cased."""
    old = {name.lower(): _number(value) for name, value in before.items()}
    delta: dict[str, float] = {}
    for name, value in after.items():
        a, b = _number(value), old.get(name.lower())
        if a is not None and b is not None:
            delta[name.lower()] = float(a - b)
    return delta


@dataclass(frozen=True)
class CounterEvidence:
    name: str
    per_point: dict[Hashable, float]  # median delta per point, in the order points first appear
    eta_squared: float  # share of the variance across measurements explained by the point
    spearman: float | None  # rank correlation with the metric (None: fewer than 2 or constant)
    spread: float  # (max - min of per-point medians) / max |median|, capped at 1


@functools.lru_cache(maxsize=4096)  # a server has a few hundred names, asked of thousands of times
def kind_of(name: str) -> str:
    """"counter", "level", "capacity" or "position", from the name (see the module's
    docstring). Only counters and levels can explain a difference."""
    name = name.lower()
    if POSITIONS.search(name):
        return "position"
    if CAPACITIES.search(name):
        return "capacity"
    if LEVELS.search(name):
        return "level"
    return "counter"


def levels_among(deltas: Sequence[Mapping[str, float]]) -> set[str]:
    """Names the name rules took for counters that went down in some measurement: a counter
    only grows, so these are levels whatever their name says."""
    return {name for d in deltas for name, value in d.items()
            if value < 0 and kind_of(name) == "counter"}


@functools.lru_cache(maxsize=4096)
def _clock_like(name: str) -> bool:
    return CLOCK_LIKE.search(name) is not None


def is_cost(name: str) -> bool:
    return bool(COSTS.search(name.lower()))


def change_size(evidence: CounterEvidence) -> float:
    """The size of the change across points, in the counter's unit per unit of work (bytes
    in 16 KiB pages, so that a byte volume does not outrank the page count it comes from)."""
    values = list(evidence.per_point.values())
    size = max(values) - min(values)
    return size / PAGE_BYTES if _is_bytes(evidence.name) else size


def weight(evidence: CounterEvidence) -> float:
    """What ranks explanations: the size of the change, a cost's COST_WEIGHT times."""
    return change_size(evidence) * (COST_WEIGHT if is_cost(evidence.name) else 1.0)


def _median(values: list[float]) -> float:
    s, h = sorted(values), len(values) // 2
    return s[h] if len(s) % 2 else s[h - 1] / 2 + s[h] / 2  # halves first: no overflow


def _spearman(x: list[float], y: list[float]) -> float | None:
    pairs = [(a, b) for a, b in zip(x, y, strict=True) if math.isfinite(b)]
    if len(pairs) < 2 or len({a for a, _ in pairs}) < 2 or len({b for _, b in pairs}) < 2:
        return None
    rx, ry = (_ranks(v) for v in zip(*pairs, strict=True))
    return float(np.clip(np.corrcoef(rx, ry)[0, 1], -1.0, 1.0))


def _ranks(values: tuple[float, ...]) -> np.ndarray:
    """Ranks from 1, tied values each given their mean rank (scipy.stats.rankdata's default,
    without the 0.6 s of importing scipy.stats for it)."""
    _, where, counts = np.unique(np.asarray(values, dtype=float), return_inverse=True,
                                 return_counts=True)
    last = np.cumsum(counts)  # each distinct value's highest rank
    return (last - (counts - 1) / 2.0)[where]


def _evidence(name: str, rows: list[tuple[Hashable, float, float]]) -> CounterEvidence | None:
    groups: dict[Hashable, list[float]] = {}
    for key, _, value in rows:
        groups.setdefault(key, []).append(value)
    if len(groups) < 2:
        return None  # nothing to compare
    x = np.array([value for _, _, value in rows])
    scale = float(np.max(np.abs(x)))
    xn = x / scale if scale else x  # in [-1, 1]: sums of squares cannot overflow; eta² scale-free
    total = float(np.sum((xn - xn.mean()) ** 2))
    if total == 0.0:
        return None  # constant
    if any(len(g) > 1 for g in groups.values()):
        between = sum(len(g) * (float(np.mean(np.divide(g, scale))) - xn.mean()) ** 2
                      for g in groups.values())
        eta = min(1.0, max(0.0, between / total))
    else:
        eta = 1.0  # one run per point: no within-point variance to judge; spread decides alone
    per_point = {key: _median(g) for key, g in groups.items()}
    lo, hi = min(per_point.values()), max(per_point.values())
    biggest = max(abs(lo), abs(hi))
    # hi - lo (Python floats) may overflow to inf only when it exceeds `biggest`: capped at 1.
    spread = 0.0 if biggest == 0.0 else min(1.0, (hi - lo) / biggest)
    rho = _spearman([v for _, _, v in rows], [m for _, m, _ in rows])
    return CounterEvidence(name, per_point, eta, rho, spread)


# Figures that count the same events under other names (InnoDB counts one page read from disk
# in four of them): one of each is shown, the others only if there is room to spare.
SYNONYMS: dict[str, str] = {
    **dict.fromkeys(("innodb_buffer_pool_reads", "innodb_pages_read", "innodb_data_reads",
                     "innodb_data_read"), "pages read from disk"),
    **dict.fromkeys(("innodb_pages_written", "innodb_data_writes", "innodb_data_written",
                     "innodb_buffer_pool_pages_flushed"), "pages written"),
    **dict.fromkeys(("innodb_os_log_written", "innodb_log_writes", "innodb_log_write_requests"),
                    "redo log written"),
}


def _family(name: str) -> tuple[str, int]:
    """A name's family and how many of it to show before others: synonyms one, else
    innodb_buffer_pool_pages_flushed -> "innodb_buffer", created_tmp_disk_tables ->
    "created_tmp", com_select -> "com", two: near-synonyms would crowd out other evidence."""
    if name in SYNONYMS:
        return SYNONYMS[name], 1
    words = name.split("_")
    return "_".join(words[:2] if len(words) >= 3 else words[:1]), 2


def explaining_counters(
    measurements: Sequence[tuple[Hashable, float, Mapping[str, float]]],
    *,
    top: int = 5,
    min_eta_squared: float = 0.8,
    min_spread: float = 0.2,
    ignore: Collection[str] = DEFAULT_IGNORE,
    kind: str = "counter",
) -> list[CounterEvidence]:
    """Figures consistent within points and different between them, best explanation first.

    kind "counter": deltas (per unit of work), levels and positions left out, costs first and
    then the largest change. kind "level": levels as they were (never per unit of work)."""
    if top < 0:
        raise ValueError("top must be >= 0")
    if kind not in ("counter", "level"):
        raise ValueError(f"unknown kind: {kind!r}")
    skip = {name.lower() for name in ignore}
    went_down = levels_among([d for _, _, d in measurements])

    def wanted(name: str) -> bool:
        lower = name.lower()
        if lower in skip or _clock_like(lower):
            return False
        if kind == "level":
            return kind_of(lower) == "level"
        return kind_of(lower) == "counter" and name not in went_down

    names = dict.fromkeys(n for _, _, d in measurements for n in d if wanted(n))
    found = []
    for name in names:
        # A measurement without this counter (e.g. the server died) just does not count for it.
        rows = [(key, float(metric), float(deltas[name])) for key, metric, deltas in measurements
                if name in deltas and math.isfinite(deltas[name])]
        ev = _evidence(name, rows)
        if ev is not None and ev.eta_squared >= min_eta_squared and ev.spread >= min_spread:
            found.append(ev)
    # By the size of the change, a cost's counted COST_WEIGHT times (3 significant digits:
    # near-equal sizes are ties); among ties a figure that is zero at some points and not at
    # others (a code path taken or not) comes first, and a count before its volume in bytes.
    # eta² and rho filter above but cannot rank: with two points every figure that changed has
    # eta² = 1 and |rho| = 1.
    found.sort(key=lambda e: (-float(f"{weight(e):.3g}"), not _switches(e), _is_bytes(e.name),
                              -e.eta_squared, e.name))
    picked: list[CounterEvidence] = []
    spare: list[CounterEvidence] = []
    families: Counter[str] = Counter()
    for ev in found:
        family, most = _family(ev.name.lower())
        (picked if families[family] < most else spare).append(ev)
        families[family] += 1
    return (picked + spare)[:top]  # "at most 2 per family" is a preference: fill up if short


def _switches(ev: CounterEvidence) -> bool:
    levels = list(ev.per_point.values())
    return min(levels) == 0 < max(levels)


def _is_bytes(name: str) -> bool:
    name = name.lower()
    volume = name.startswith(_BYTE_FAMILIES) and name.endswith(("_read", "_written"))
    return volume or "bytes" in name


def _count(value: float) -> str:
    r = float(f"{value:.3g}")
    return str(int(r)) if math.isfinite(r) and r.is_integer() else f"{r:.3g}"


def _bytes(value: float) -> str:
    r = float(f"{value:.3g}")  # round first, so 999 999 becomes "1 MB", not "1e+03 KB"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(r) >= size:
            return f"{_count(r / size)} {unit}"
    return "0" if r == 0 else f"{_count(r)} B"


def describe(
    evidence: CounterEvidence, label: Callable[[Hashable], str], per: str = "per run"
) -> str:
    """One clause, e.g. "created_tmp_disk_tables: 1 per run at 1M–8M, 0 from 16M"; a level
    says so and has no "per": "innodb_buffer_pool_pages_free (level): 0 at 16M, 9000 at 256M"."""
    is_bytes = _is_bytes(evidence.name)
    level = kind_of(evidence.name) == "level"
    if level:
        per = ""
    groups: list[tuple[str, list[Hashable]]] = []  # adjacent points with equal rounded values
    for key, value in evidence.per_point.items():
        text = _bytes(value) if is_bytes else _count(value)
        if groups and groups[-1][0] == text:
            groups[-1][1].append(key)
        else:
            groups.append((text, [key]))
    clauses = []
    for i, (text, keys) in enumerate(groups):
        if i == 0 and per:
            text = f"{text} {per}"  # once, as a person would write it: "369 KB per transaction"
        if len(keys) == 1:
            where = f"at {label(keys[0])}"
        elif len(groups) == 1:
            where = "at all points"
        elif i == len(groups) - 1:
            where = f"from {label(keys[0])}"
        else:
            where = f"at {label(keys[0])}–{label(keys[-1])}"
        clauses.append(f"{text} {where}")
    name = f"{evidence.name} (level)" if level else evidence.name
    return f"{name}: {', '.join(clauses) or 'no data'}"
