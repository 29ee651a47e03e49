"""Which server counters explain a result: SHOW GLOBAL STATUS deltas that moved with the setting.

Pure functions, no I/O.

Why eta² and spread rather than a fixed list: the counter that explains a win depends on the
workload (temporary tables for a GROUP BY, buffer pool reads for a scan, log writes for commits).
A counter explains a sweep when it is the same run after run at one point (eta², the share of
its variance the point explains, near 1) and clearly different between points (spread), so it
is computed from the data; rank correlation with the metric then puts the closest tracker first.
"""

from __future__ import annotations

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


def _median(values: list[float]) -> float:
    s, h = sorted(values), len(values) // 2
    return s[h] if len(s) % 2 else s[h - 1] / 2 + s[h] / 2  # halves first: no overflow


def _spearman(x: list[float], y: list[float]) -> float | None:
    pairs = [(a, b) for a, b in zip(x, y, strict=True) if math.isfinite(b)]
    if len(pairs) < 2 or len({a for a, _ in pairs}) < 2 or len({b for _, b in pairs}) < 2:
        return None
    from scipy import stats as sps  # here, not at the top: scipy.stats costs ~0.6 s to import

    rx, ry = (sps.rankdata(v) for v in zip(*pairs, strict=True))
    return float(np.clip(np.corrcoef(rx, ry)[0, 1], -1.0, 1.0))


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


def _family(name: str) -> str:
    # innodb_buffer_pool_reads -> "innodb_buffer", created_tmp_disk_tables -> "created_tmp",
    # com_select -> "com": near-synonyms share a family and would crowd out other evidence.
    words = name.split("_")
    return "_".join(words[:2] if len(words) >= 3 else words[:1])


def explaining_counters(
    measurements: Sequence[tuple[Hashable, float, Mapping[str, float]]],
    *,
    top: int = 5,
    min_eta_squared: float = 0.8,
    min_spread: float = 0.2,
    ignore: Collection[str] = DEFAULT_IGNORE,
) -> list[CounterEvidence]:
    """Counters consistent within points and different between them, best explanation first."""
    if top < 0:
        raise ValueError("top must be >= 0")
    skip = {name.lower() for name in ignore}
    names = dict.fromkeys(n for _, _, d in measurements for n in d
                          if n.lower() not in skip and not CLOCK_LIKE.search(n.lower()))
    found = []
    for name in names:
        # A measurement without this counter (e.g. the server died) just does not count for it.
        rows = [(key, float(metric), float(deltas[name])) for key, metric, deltas in measurements
                if name in deltas and math.isfinite(deltas[name])]
        ev = _evidence(name, rows)
        if ev is not None and ev.eta_squared >= min_eta_squared and ev.spread >= min_spread:
            found.append(ev)
    # Near-equal scores are ties (counters moving with the same split of the runs); among
    # them a counter that is zero at some points and not at others comes first: a code path
    # taken or not (a temporary table on disk, a read from disk) is the clearest explanation.
    found.sort(key=lambda e: (-round(e.eta_squared * abs(e.spearman or 0.0), 2),
                              not _switches(e), -e.spread, e.name))
    picked: list[CounterEvidence] = []
    spare: list[CounterEvidence] = []
    families: Counter[str] = Counter()
    for ev in found:
        family = _family(ev.name.lower())
        (picked if families[family] < 2 else spare).append(ev)
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
    """One clause, e.g. "created_tmp_disk_tables: 1 per run at 1M–8M, 0 from 16M"."""
    is_bytes = _is_bytes(evidence.name)
    groups: list[tuple[str, list[Hashable]]] = []  # adjacent points with equal rounded values
    for key, value in evidence.per_point.items():
        text = _bytes(value) if is_bytes else _count(value)
        if groups and groups[-1][0] == text:
            groups[-1][1].append(key)
        else:
            groups.append((text, [key]))
    clauses = []
    for i, (text, keys) in enumerate(groups):
        if i == 0 and per and not is_bytes:
            text = f"{text} {per}"  # the unit once, as a person would write it; bytes carry theirs
        if len(keys) == 1:
            where = f"at {label(keys[0])}"
        elif len(groups) == 1:
            where = "at all points"
        elif i == len(groups) - 1:
            where = f"from {label(keys[0])}"
        else:
            where = f"at {label(keys[0])}–{label(keys[-1])}"
        clauses.append(f"{text} {where}")
    return f"{evidence.name}: {', '.join(clauses) or 'no data'}"
