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

from knoblab.vocabulary import Finding, PointVerdict

FINDING_WORDS: dict[Finding, str] = {
    Finding.HELPS: "shown to help",
    Finding.HURTS: "shown to hurt",
    Finding.SAME: "shown the same",
    Finding.UNSHOWN: "not shown either way",
}

_MINUS = "\u2212"


def finding_text(finding: Finding, min_effect: float) -> str:
    """"shown to help", "shown the same (within ±3%)", ...: "the same" always says how close."""
    words = FINDING_WORDS[finding]
    return f"{words} (within ±{min_effect:.0%})" if finding == Finding.SAME else words


def finding_of(interval: tuple[float, float] | None, min_effect: float) -> Finding:
    """What an interval of a gain (+0.05: 5% better) shows by itself: helps or hurts when it
    lies wholly on one side of zero, the same when it lies within ±min_effect, else nothing.
    A verdict from a test with a stricter level (Holm, sequential) may say "unshown" where
    this says more; it may never say the opposite of this or claim more than it."""
    if interval is None:
        return Finding.UNSHOWN
    low, high = interval
    if low > 0:
        return Finding.HELPS
    if high < 0:
        return Finding.HURTS
    if -min_effect < low and high < min_effect:
        return Finding.SAME
    return Finding.UNSHOWN


def change_finding(current: PointVerdict) -> Finding:
    """What the change from the current configuration to the leader showed, as the current
    one's verdict against the leader says it: shown worse, the change helps; shown
    equivalent, the same; else nothing either way."""
    return Finding.HELPS if current == PointVerdict.WORSE else \
        Finding.SAME if current == PointVerdict.EQUIVALENT else Finding.UNSHOWN


def agrees(finding: Finding, interval: tuple[float, float] | None, min_effect: float) -> bool:
    """Whether `finding` can be said of `interval`: "unshown" always can (a stricter test may
    not decide), a claim only when the interval shows it."""
    return finding == Finding.UNSHOWN or finding == finding_of(interval, min_effect)


def gain_words(gain: float, direction: Literal["minimize", "maximize"], unit: str = "") -> str:
    """A gain (+0.05: 5% better than the reference) in words a reader takes at face value: for
    a rate (maximize), the change of the rate ("+5.0% tps"); for a time (minimize), the change
    of the time ("time −20.0%"), led by how many times faster or slower once that is 1.5× or
    more ("4.8× faster (time −79.1%)")."""
    if direction == "maximize":
        return signed_percent(gain) + (f" {unit}" if unit else "")
    speedup = 1.0 + gain  # the reference's time over the new time
    if speedup <= 0 or not math.isfinite(speedup):
        return "—"
    change = f"time {signed_percent(1.0 / speedup - 1.0)}"
    if speedup >= 1.5:
        return f"{speedup:.2g}× faster ({change})"
    if speedup <= 1 / 1.5:
        return f"{1.0 / speedup:.2g}× slower ({change})"
    return change


def signed_percent(x: float) -> str:
    """"+5.0%", "−4.1%" (a true minus), "0.0%": a change as `gain_words` writes it."""
    text = f"{abs(x):.1%}"
    if float(text.rstrip("%")) == 0:
        return text
    return ("+" if x > 0 else _MINUS) + text


def confidence_text(confidence: float) -> str:
    """"95%", "98.3%", "99.96%": an interval's level, whole when it is, else to one decimal,
    more only where that would round it up to "100%"."""
    percent = confidence * 100
    if abs(percent - round(percent)) < 1e-9 and round(percent) < 100:
        return f"{round(percent)}%"
    for decimals in range(1, 6):
        text = f"{percent:.{decimals}f}"
        if float(text) < 100.0:
            return f"{text}%"
    return f"{percent:g}%"


def gain_interval_words(gain: float, interval: tuple[float, float] | None,
                        direction: Literal["minimize", "maximize"], unit: str = "",
                        confidence: float = 0.95) -> str:
    """A gain and its interval in `gain_words`' terms: for a rate, "+5.0% tps (95% CI +2.0% to
    +8.0%)"; for a time, the interval of the time's change beside it, "4.8× faster (time
    −79.1%; 95% CI −81.0% to −77.0%)"."""
    said = gain_words(gain, direction, unit)
    if interval is None:
        return said
    low, high = interval
    if direction == "maximize":
        ci = f"{confidence_text(confidence)} CI {signed_percent(low)} to {signed_percent(high)}"
        return f"{said} ({ci})"
    # The time's change falls as the gain rises: the gain's upper end is the time's lower.
    ends = [1.0 / (1.0 + g) - 1.0 if 1.0 + g > 0 else math.inf for g in (high, low)]
    shown = ["more than doubled" if not math.isfinite(e) else signed_percent(e) for e in ends]
    ci = f"{confidence_text(confidence)} CI {shown[0]} to {shown[1]}"
    return f"{said[:-1]}; {ci})" if said.endswith(")") else f"{said} ({ci})"

