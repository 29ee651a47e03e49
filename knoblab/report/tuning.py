"""What a search found, for people (terminal) and for programs (JSON)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from knoblab.tune import TrialOutcome, TuneResult, Validation
from knoblab.units import format_duration, format_size

STATES = {"baseline": "the baseline", "refused": "refused before running",
          "failed": "the server refused it"}


def gain_text(outcome: TrialOutcome) -> str:
    """"+8.1% (95% CI +4.0% to +12.3%)": better than the baseline when positive."""
    if outcome.gain is None or outcome.state == "baseline":
        return STATES.get(outcome.state, outcome.state)
    text = f"{outcome.gain:+.1%}"
    interval = outcome.interval()
    if interval is not None:
        text += f" (95% CI {interval[0]:+.1%} to {interval[1]:+.1%})"
    return text


def trial_text(outcome: TrialOutcome) -> str:
    if outcome.state == "baseline":
        return "the baseline: every trial is measured against it"
    changes = changes_text(outcome.changes)
    if outcome.state in ("refused", "failed"):
        return f"{changes}: {STATES[outcome.state]}: {outcome.error}"
    return f"{changes}: {gain_text(outcome)}"


def changes_text(changes: dict[str, str]) -> str:
    return ", ".join(f"{k}={_value(v)}" for k, v in changes.items()) or "the baseline"


def _value(value: str) -> str:
    return format_size(int(value)) if value.isdigit() and int(value) >= 1024 else value


def print_tune(result: TuneResult, out: Console) -> None:
    trials = result.trials
    scored = sorted((t for t in trials if t.state == "scored"), key=lambda t: t.score or 0.0)
    out.print(f"study {result.study}: {len(trials)} trials in {format_duration(result.spent)} "
              f"(stopped: {'its trials are done' if result.stopped == 'trials' else 'budget'}); "
              f"{sum(t.state in ('refused', 'failed') for t in trials)} refused or failed",
              markup=False, highlight=False)
    table = Table(title="best trials (gain against the baseline measured beside each; + is "
                  "better)", title_justify="left")
    table.add_column("trial", justify="right")
    table.add_column("changes from the baseline")
    table.add_column("gain", justify="right")
    table.add_column("95% CI", justify="right")
    for t in scored[:8]:
        interval = t.interval()
        table.add_row(str(t.number), changes_text(t.changes), f"{t.gain:+.1%}",
                      "—" if interval is None else f"{interval[0]:+.1%} to {interval[1]:+.1%}")
    out.print(table)
    if not result.validations:
        out.print("No trial scored better than the baseline: keep the current configuration.",
                  markup=False, highlight=False)
        return
    out.print("validation (each candidate against the baseline in fresh starts, until decided):",
              markup=False, highlight=False)
    for v in result.validations:
        out.print(f"  trial {v.trial.number}: {validation_text(v, result.min_effect)}",
                  markup=False, highlight=False)
    chosen = result.recommended
    if chosen is None:
        out.print(f"No configuration was shown to beat the current one (by {result.min_effect:.0%}"
                  " or more): keep it.", markup=False, highlight=False)
        return
    out.print(f"Recommended: trial {chosen.trial.number}, {gain_validated(chosen)} against the "
              "current configuration. As a my.cnf fragment:", markup=False, highlight=False)
    out.print(mycnf(chosen.trial.changes), markup=False, highlight=False)


def validation_text(v: Validation, min_effect: float) -> str:
    words = {"better": "better than the baseline", "worse": "worse than the baseline",
             "same": f"the same as the baseline (within ±{min_effect:.0%})",
             "undecided": "not decided (the machine was too noisy at this budget)"}
    return f"{gain_validated(v)}, {words[v.verdict]} ({v.rounds} rounds)"


def gain_validated(v: Validation) -> str:
    if v.gain is None:
        return "no gain measured"
    text = f"{v.gain:+.1%}"
    if v.interval is not None:
        text += f" (95% CI {v.interval[0]:+.1%} to {v.interval[1]:+.1%})"
    return text


def mycnf(changes: dict[str, str]) -> str:
    return "[mysqld]\n" + "\n".join(f"{k} = {_value(v)}" for k, v in changes.items())


def tune_json(result: TuneResult) -> dict[str, Any]:
    chosen = result.recommended
    return {
        "study": result.study,
        "space": [d.describe() for d in result.space.dimensions],
        "baseline": result.baseline,
        "spent_seconds": round(result.spent, 1),
        "stopped": result.stopped,
        "trials": [{"number": t.number, "state": t.state, "changes": t.changes,
                    "gain": t.gain, "ci95": t.interval(), "blocks": len(t.ratios),
                    "run_id": t.run_id, "error": t.error} for t in result.trials],
        "validations": [{"trial": v.trial.number, "run_id": v.run_id, "verdict": v.verdict,
                         "gain": v.gain, "ci95": v.interval, "rounds": v.rounds}
                        for v in result.validations],
        "recommended": None if chosen is None else {
            "trial": chosen.trial.number, "settings": chosen.trial.changes,
            "gain": chosen.gain, "ci95": chosen.interval,
            "mycnf": mycnf(chosen.trial.changes)},
    }
