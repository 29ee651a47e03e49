"""How a run judges its points, as a spec sets it and a stored run keeps it: the statistics'
settings and the words for a goal's direction, a test and a centre. Declarations only, so that
what reads a stored run needs no numerical library (knoblab.stats computes with them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Direction = Literal["minimize", "maximize"]
Test = Literal["welch-log", "welch", "mann-whitney"]
Spending = Literal["pocock", "obf"]
Centre = Literal["median", "mean"]


@dataclass(frozen=True)
class Statistics:
    """How a run judges its points; the defaults live here alone (a stored run that lacks a
    setting gets the same default as a new spec)."""

    min_effect: float = 0.03  # smaller differences are never "worse", however significant
    alpha: float = 0.05
    confidence: float = 0.95
    test: Test = "welch-log"  # a kind's objective may choose another default (throughput)
    seed: int = 1  # fixes the interleaved order and the bootstrap
