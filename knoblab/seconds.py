"""One second of a time-series workload: what its driver reports each second, and the columns of
the store's per-second table. Kept apart from knoblab.records so that the store's schema, which
every command opens, does not import every record (`knoblab runs` starts faster)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Second:
    """One second of a time-series workload, as its driver reported it: also the store's
    per-second table, column for column (knoblab.store.schema)."""

    t: float  # seconds since the start of the run
    threads: int
    tps: float
    qps: float
    reads: float
    writes: float
    other: float
    latency_ms: float  # at the run's percentile
    errors: float  # per second
    reconnects: float  # per second
