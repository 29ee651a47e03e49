"""The words for what a comparison showed: one vocabulary for sweeps, steps, tune and compare.

Every comparison knoblab reports answers one question — does this change (a value instead of
the default, a step on top of the last, a tuned configuration instead of the baseline, one run
against another) help? — and has one of four answers (`Finding`). Each output says it with the
same words (`FINDING_WORDS`, `finding_text`), and its figure with `gain_words`: a time that
falls is "4.8× faster (time −79%)", never "+378%". An interval that bounds nothing is said as
such (`bounds`), never as numbers. What changed in a run's workload since it began, which
refuses its resume, is said here too (`workload_changes`).

A finding must agree with its interval (`finding_of`): an interval wholly on the side of
helping is never "not shown", and "the same" needs the interval inside ±min_effect.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from knoblab.vocabulary import Finding, PointVerdict

FINDING_WORDS: dict[Finding, str] = {
    Finding.HELPS: "shown to help",
    Finding.HURTS: "shown to hurt",
    Finding.SAME: "shown the same",
    Finding.UNSHOWN: "not shown either way",
}

_MINUS = "\u2212"
# An end of a ratio's interval at or beyond this factor either way, zero or infinite (two
# measurements at a Bonferroni level, a t interval cut at zero) bounds nothing a reader could
# use: it is said as not bounded, never as a number such as 2149371601747197156277784412160.
LOOSEST_BOUND = 1000.0
NOT_BOUNDED = "not bounded"
WHY_NOT_BOUNDED = (f"≤ x or ≥ x: an interval bounded on one side only, and {NOT_BOUNDED}: "
                   f"on neither; at its level it reaches zero or a factor of "
                   f"{LOOSEST_BOUND:.0f} (or, from one measurement a side, has no spread): too "
                   "few measurements to bound the change")


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


def leader_verdict(direction: str) -> PointVerdict:
    """The verdict of a leader shown better than something that the run does not recommend:
    "fastest measured" for a time, "highest tps measured" for a throughput."""
    return PointVerdict.FASTEST if direction == "minimize" else PointVerdict.HIGHEST


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


def bounds(low: float, high: float) -> tuple[bool, bool]:
    """Which ends of an interval of a ratio of two positive levels bound it, (lower, upper):
    an end within a factor of LOOSEST_BOUND either way; neither of an interval without
    spread."""
    if not low < high:
        return False, False
    return (math.isfinite(low) and low > 1 / LOOSEST_BOUND,
            math.isfinite(high) and high < LOOSEST_BOUND)


def bounded(low: float, high: float) -> bool:
    """Whether both ends of an interval of a ratio bound it (`bounds`)."""
    return all(bounds(low, high))


def gain_bounds(interval: tuple[float, float]) -> tuple[bool, bool]:
    """`bounds` of the interval of a gain (+0.05: 5% better), the ratio's less 1."""
    return bounds(1.0 + interval[0], 1.0 + interval[1])


def interval_text(low: str, high: str, ends: tuple[bool, bool], between: str = " to ") -> str:
    """Two ends as `bounds` judged them: "−9.0% to −5.1%", "≤ −5.1%" (bounded above only),
    "≥ −9.0%", or "not bounded"."""
    if all(ends):
        return f"{low}{between}{high}"
    if ends[1]:
        return f"≤ {high}"
    if ends[0]:
        return f"≥ {low}"
    return NOT_BOUNDED


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
    ci = f"{confidence_text(confidence)} CI {gain_interval_ends(interval, direction)}"
    if direction == "maximize":
        return f"{said} ({ci})"
    return f"{said[:-1]}; {ci})" if said.endswith(")") else f"{said} ({ci})"


def gain_interval_ends(interval: tuple[float, float],
                       direction: str) -> str:
    """The interval of a gain in the terms gain_words gives its estimate: of the rate for a
    rate ("+2.0% to +8.0%"), of the time's change for a time ("−81.0% to −77.0%"); an end
    that bounds nothing left out ("≤ −77.0%"), or "not bounded"."""
    low, high = interval
    lower, upper = gain_bounds(interval)
    if direction == "maximize":
        return interval_text(signed_percent(low), signed_percent(high), (lower, upper))
    # The time's change falls as the gain rises: the gain's upper end is the time's lower.
    ends = [signed_percent(1.0 / (1.0 + g) - 1.0) if 1.0 + g > 0 else "" for g in (high, low)]
    return interval_text(ends[0], ends[1], (upper, lower))


# Words in a run's description of its workload that are not the work itself (a summary, what
# follows from its sessions and slice): another version may say them otherwise, so resuming a
# run and comparing two leave them out.
DESCRIPTIVE_KEYS = frozenset({"title", "at_once"})


def workload_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """What differs between the workload a run began with and the one its spec gives now (a
    resume is refused over it), in words: the dump, the captured log, the script, the SQL, or
    the keys that differ; "" when nothing does."""
    keys = {k for k in before.keys() | after.keys()
            if k not in DESCRIPTIVE_KEYS and before.get(k) != after.get(k)}
    dump = (after.get("dump") or before.get("dump") or {}).get("file")
    log = after.get("log") or before.get("log")
    said, named = [], set()
    for these, what in (({"dump"}, f"the dump it loads, {dump}, was replaced or changed"),
                        ({"log", "plan", "classes"}, f"the captured log it replays, {log}, "
                                                     "changed"),
                        ({"setup", "body", "statements_per_iteration"},
                         "its script changed (in the spec, or a file it reads)"),
                        ({"sql"}, "its SQL changed")):
        if keys & these:
            said.append(what)
            named |= these
    if rest := sorted(keys - named):
        said.append(f"its {', '.join(rest)} changed")
    return "; ".join(said)
