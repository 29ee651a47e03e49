"""The words for what a comparison showed: one vocabulary for sweeps, steps, tune and compare.

Every comparison knoblab reports answers one question — does this change (a value instead of
the default, a step on top of the last, a tuned configuration instead of the baseline, one run
against another) help? — and has one of four answers (`Finding`). Each output says it with the
same words (`FINDING_WORDS`, `finding_text`), and its figure with `gain_words`: a time that
falls is "4.8× faster (time −79%)", never "+378%".

A finding must agree with its interval (`finding_of`): an interval wholly on the side of
helping is never "not shown", and "the same" needs the interval inside ±min_effect.
"""

from __future__ import annotations

import math
from typing import Literal

Finding = Literal["helps", "hurts", "same", "unshown"]

FINDING_WORDS: dict[Finding, str] = {
    "helps": "shown to help",
    "hurts": "shown to hurt",
    "same": "shown the same",
    "unshown": "not shown either way",
}

_MINUS = "\u2212"


def finding_text(finding: Finding, min_effect: float) -> str:
    """"shown to help", "shown the same (within ±3%)", ...: "the same" always says how close."""
    words = FINDING_WORDS[finding]
    return f"{words} (within ±{min_effect:.0%})" if finding == "same" else words


def finding_of(interval: tuple[float, float] | None, min_effect: float) -> Finding:
    """What an interval of a gain (+0.05: 5% better) shows by itself: helps or hurts when it
    lies wholly on one side of zero, the same when it lies within ±min_effect, else nothing.
    A verdict from a test with a stricter level (Holm, sequential) may say "unshown" where
    this says more; it may never say the opposite of this or claim more than it."""
    if interval is None:
        return "unshown"
    low, high = interval
    if low > 0:
        return "helps"
    if high < 0:
        return "hurts"
    if -min_effect < low and high < min_effect:
        return "same"
    return "unshown"


def agrees(finding: Finding, interval: tuple[float, float] | None, min_effect: float) -> bool:
    """Whether `finding` can be said of `interval`: "unshown" always can (a stricter test may
    not decide), a claim only when the interval shows it."""
    return finding == "unshown" or finding == finding_of(interval, min_effect)


def gain_words(gain: float, direction: Literal["minimize", "maximize"], unit: str = "") -> str:
    """A gain (+0.05: 5% better than the reference) in words a reader takes at face value: for
    a rate (maximize), the change of the rate ("+5.0% tps"); for a time (minimize), the change
    of the time ("time −20.0%"), led by how many times faster or slower once that is 1.5× or
    more ("4.8× faster (time −79.1%)")."""
    if direction == "maximize":
        return _signed_percent(gain) + (f" {unit}" if unit else "")
    speedup = 1.0 + gain  # the reference's time over the new time
    if speedup <= 0 or not math.isfinite(speedup):
        return "—"
    change = f"time {_signed_percent(1.0 / speedup - 1.0)}"
    if speedup >= 1.5:
        return f"{speedup:.2g}× faster ({change})"
    if speedup <= 1 / 1.5:
        return f"{1.0 / speedup:.2g}× slower ({change})"
    return change


def _signed_percent(x: float) -> str:
    text = f"{abs(x):.1%}"
    if float(text.rstrip("%")) == 0:
        return text
    return ("+" if x > 0 else _MINUS) + text
