"""A tuning study as the results store keeps it for people: one row per study.

`knoblab tune` measures each step of its search, validation and reduction as a run of its
own; listed one
by one they would bury every other run (a study of 40 trials is some 150 runs). The store
keeps a row per study instead (knoblab.store.schema.studies): its progress while it searches (trials
done, the best so far), and, when its search ends, the result its report was made from, so
that `knoblab report study:NAME` renders that report again without measuring. Its runs carry
its name (RunInfo.study) and are listed with `knoblab runs --study NAME`.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knoblab import __version__
from knoblab.errors import UserError
from knoblab.judging import Direction
from knoblab.store import Store
from knoblab.units import plural
from knoblab.vocabulary import RunStatus

if TYPE_CHECKING:  # the records are read only from a finished study: `knoblab runs` of
    # runs alone starts without them
    from knoblab.records import TrialOutcome, TuneResult

PREFIX = "study:"  # `knoblab report study:NAME`: never a run's id, which is hexadecimal


class Recorder:
    """Keeps a study's row up to date while `knoblab tune` searches: wraps the search's
    listener (its progress calls pass through unchanged) and tags the runs made meanwhile."""

    def __init__(self, store: Store, name: str, spec_source: str, machine: dict[str, str],
                 listener: Any) -> None:
        self.store, self.name, self.source, self.listener = store, name, spec_source, listener
        self.info: dict[str, Any] = {
            "owner": {"pid": os.getpid(), "host": socket.gethostname()},
            "machine": machine, "knoblab_version": __version__}
        self.started = False

    def __getattr__(self, name: str) -> Any:  # message, close, and whatever else it has
        return getattr(self.listener, name)

    def _save(self, status: RunStatus, **values: Any) -> None:
        self.store.save_study(self.name, status=status, spec_source=self.source,
                              info=self.info, **values)

    def searching(self, total: int, done: int, budget_left: float | None) -> None:
        # Called once the checks passed and the study is open: the study exists from here.
        self.info.update(trials=done, total=total)
        if not self.started:
            self.started = True
            self._save(RunStatus.RUNNING)
        self.listener.searching(total, done, budget_left)

    def scored(self, outcome: TrialOutcome, best: TrialOutcome | None,
               budget_left: float | None, direction: Direction) -> None:
        from knoblab.report.tuning import gain_text

        # counted, not read off the trial's number: skipped repeats take numbers too
        self.info["trials"] = int(self.info.get("trials", 0)) + 1
        if best is not None:
            self.info["best"] = f"trial {best.number} {gain_text(best, direction)}"
        self._save(RunStatus.RUNNING)
        self.listener.scored(outcome, best, budget_left, direction)

    def finished(self, result: TuneResult) -> None:
        self.info.update(trials=len(result.trials), server=result.server,
                         spent=result.spent, summary=summary(result))
        self._save(RunStatus.DONE, result=result_to_json(result))

    def failed(self, exc: BaseException) -> None:
        """The search stopped before its end (Ctrl-C, an error): what it did is in the
        study; the row says it stopped."""
        if not self.started:
            return
        interrupted = isinstance(exc, KeyboardInterrupt | SystemExit)
        self._save(RunStatus.INTERRUPTED if interrupted else RunStatus.FAILED,
                   error=None if interrupted else " ".join(str(exc).split())[:500])


def summary(result: TuneResult) -> str:
    """What the study recommends, in a line: its validated settings and gain, or that it
    recommends nothing."""
    from knoblab.recommend import claim, settings
    from knoblab.report.text import first_few
    from knoblab.report.tuning import gain_validated, unsettled
    from knoblab.units import setting_text

    chosen, own = result.recommended, claim(result)
    if chosen is not None:
        # The recommendation's own gain; a reduced one not measured as itself says so.
        gain = gain_validated(own, result) if own is not None else \
            (f"its own gain not measured (trial {chosen.trial.number}'s: "
             f"{gain_validated(chosen, result)})")
        # a row of knoblab runs: a few settings named, sizes for people, the rest counted
        # (knoblab report study:NAME has them all)
        named = [f"{k}={setting_text(k, v)}" for k, v in settings(result).items()]
        return f"recommended: {first_few(named) or 'the baseline'}, {gain}"
    if unsettled(result) is not None:
        return "nothing recommended yet: no candidate validated"
    return "nothing recommended: keep the current configuration"


def describe(study: dict[str, Any]) -> str:
    """A study's trials and best gain (while it searches) or recommendation (when done)."""
    info = study["info"]
    trials = plural(int(info.get("trials", 0)), "trial")
    found = _summary_of(study) if study["status"] == RunStatus.DONE else \
        (f"best so far: {info['best']}" if info.get("best") else None)
    return f"{trials}; {found}" if found else trials


def _summary_of(study: dict[str, Any]) -> str | None:
    """A finished study's summary, made again from its result (a summary stored by an older
    version may list every setting in bytes), else as stored."""
    if study.get("result"):
        with contextlib.suppress(Exception):  # one study's unreadable result hides no other
            return summary(result_from_json(study["result"]))
    return study["info"].get("summary")


def stored_result(store: Store, name: str) -> tuple[TuneResult, dict[str, Any]]:
    """The result of the study named `name` as its report was made from it, and its row."""
    study = store.study(name)
    if study is None:
        known = [s["name"] for s in store.studies()]
        hint = f" (studies: {', '.join(known[:5])}{', …' if len(known) > 5 else ''})" \
            if known else ""
        raise UserError(f"no study {name!r} in the store{hint}; list them with: knoblab runs")
    if study["result"] is None:
        if study["status"] == RunStatus.RUNNING:
            owner = study["info"].get("owner") or {}
            raise UserError(f"study {name!r} is still searching (process {owner.get('pid')} on "
                            f"{owner.get('host')}): its report is written when its search ends")
        raise UserError(f"study {name!r} stopped before its search ended: go on with "
                        f"{_tune_again(store, study)} (its trials are kept), which writes its "
                        "report")
    try:
        return result_from_json(study["result"]), study
    except (TypeError, KeyError, ValueError, AttributeError, NameError):
        raise UserError(f"study {name!r} was stored by another knoblab version "
                        f"({study['info'].get('knoblab_version') or 'unknown'}): its report is "
                        f"made again by {_tune_again(store, study)}, which measures nothing "
                        "already measured") from None


def latest(store: Store) -> str:
    """What `latest` names where a study stands for itself (knoblab report): whichever
    knoblab did last, the newest run of its own (by its start) or a study (by its last
    change: a study's trials, validations and reductions are the study's), as the run's id
    or study:NAME; "latest" itself when the store holds neither (Store.run says so)."""
    run = store.newest_run()
    study = max(store.studies(), key=lambda s: s["updated_at"], default=None)
    if study is not None and (run is None or study["updated_at"] >= run["created_at"]):
        return PREFIX + study["name"]
    return "latest" if run is None else str(run["id"])


def _tune_again(store: Store, study: dict[str, Any]) -> str:
    """knoblab tune with the study's spec file, found beside its runs' spec (their folder is
    kept with them), else named by the study."""
    from knoblab.runner import tune_command
    from knoblab.store import RunInfo

    folder = None
    with contextlib.suppress(Exception):  # a damaged run row: the study is still named
        for run in store.list_runs(limit=200):
            info = RunInfo.from_json(json.loads(run["info"] or "{}"))
            if info.study == study["name"] and info.spec_dir:
                folder = Path(info.spec_dir)
                break
    return tune_command(study["spec_source"] or "", folder, study["name"])


# --- the result as JSON, and back ----------------------------------------------------------------


def result_to_json(result: TuneResult) -> dict[str, Any]:
    return result.to_json()


def result_from_json(data: dict[str, Any]) -> TuneResult:
    from knoblab.records import TuneResult

    return TuneResult.from_json(data)


def report_folder(name: str) -> Path:
    """Where a study's report goes by default (as knoblab tune writes it)."""
    import re

    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip(".-")[:60] or "study"
    return Path("knoblab-results") / f"study-{slug}"
