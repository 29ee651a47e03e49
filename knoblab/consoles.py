"""What the commands show while they work and when they end: progress bars with ETA and a line
per measurement, trial or window (each kind of command its own view), and the terminal a command
prints its answer to. Every string is shown literally; a closed or full terminal drops them
rather than stopping the command (knoblab.terminal)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from knoblab import places, terminal
from knoblab.errors import UserError
from knoblab.literal import literal
from knoblab.units import format_duration

if TYPE_CHECKING:
    from knoblab.judging import Direction
    from knoblab.records import TrialOutcome
    from knoblab.seconds import Second

# Progress and messages go to stderr; a command's answer to stdout (`stdout`).
console = terminal.stderr()


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                    MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"),
                    terminal.BudgetedTimeRemaining(),
                    console=console, transient=False)


class ConsoleListener:
    """Shows the run as it happens: a progress bar with ETA and a line per measurement."""

    def __init__(self) -> None:
        self.progress = _progress()
        self.task: TaskID | None = None
        self.unit = "s"
        self.dataset_task: TaskID | None = None

    def message(self, text: str) -> None:
        # one message, one line (the terminal wraps it): logs and grep see it whole
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    def dataset_progress(self, done: int, total: int) -> None:
        if self.dataset_task is None:
            self.progress.start()
            self.dataset_task = self.progress.add_task("building dataset", total=total)
        self.progress.update(self.dataset_task, completed=done, total=total)

    def plan(self, total: int, done: int, unit: str) -> None:
        self.unit = unit
        self.progress.start()
        self.task = self.progress.add_task("measuring", total=total, completed=done)

    def trial(self, label: str, repetition: int, status: str, value: float | None,
              error: str | None) -> None:
        if value is None:
            shown = f"failed: {literal(error)}"  # the server's words, on this one line
        else:
            shown = f"{value:,.1f} tps" if self.unit == "tps" else f"{value:.4f} s"
        console.print(f"  {literal(label):<40} #{repetition + 1:<3} {shown}", markup=False,
                      highlight=False)
        if self.task is not None:
            self.progress.advance(self.task)

    def decision(self, undecided: list[str], most_left: int, budget_left: float | None
                 ) -> None:
        if self.task is None:
            return
        task = self.progress.tasks[self.task]
        names = ", ".join(undecided[:4]) + (f" and {len(undecided) - 4} more"
                                             if len(undecided) > 4 else "")
        left = "" if budget_left is None else f", {format_duration(budget_left)} of budget left"
        console.print(f"  undecided: {literal(names)}{left}", markup=False, highlight=False)
        # The bar's end: every remaining round at most; the ETA follows from it.
        self.progress.update(self.task, total=task.completed + most_left,
                             description="measuring (until decided)")

    def second(self, label: str, second: Second) -> None:
        # The live readout of a time-series run: the latest second's throughput.
        if self.task is not None:
            self.progress.update(self.task, description=(
                f"measuring  {literal(label)}  {second.t:>4.0f} s  {second.tps:>9,.0f} tps"))

    def close(self) -> None:
        if self.progress.live.is_started:
            self.progress.stop()


class TuneConsole:
    """Shows a search as it happens: trials done against the study's total, with ETA, and a
    line per trial with the best so far and its interval."""

    def __init__(self) -> None:
        self.progress = _progress()
        self.task: TaskID | None = None

    def message(self, text: str) -> None:
        # one message, one line (the terminal wraps it): logs and grep see it whole
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    def searching(self, total: int, done: int, budget_left: float | None) -> None:
        if self.task is None:
            self.progress.start()
            self.task = self.progress.add_task("searching", total=total, completed=done)
        left = "" if budget_left is None else f" ({format_duration(max(0.0, budget_left))} left)"
        # A study that had more trials than `trials` now asks for: never "7/6". The ETA never
        # reaches past the budget left (the search ends by then).
        self.progress.update(self.task, completed=done, total=max(total, done),
                             description=f"searching{left}",
                             deadline=terminal.deadline(budget_left))

    def scored(self, outcome: TrialOutcome, best: TrialOutcome | None,
               budget_left: float | None, direction: Direction) -> None:
        from knoblab.report.tuning import gain_text, trial_text

        line = f"  trial {outcome.number:<4} {trial_text(outcome, direction)}"
        if best is not None:
            line += f"   best so far: trial {best.number} {gain_text(best, direction)}"
        console.print(literal(line), markup=False, highlight=False)

    def close(self) -> None:
        if self.progress.live.is_started:
            self.progress.stop()


class CaptureConsole:
    """Shows a capture: the window's bar (statements so far, ETA), then the dump's in bytes."""

    def __init__(self) -> None:
        self.progress: Progress | None = None

    def message(self, text: str) -> None:
        console.print(literal(text), markup=False, highlight=False, soft_wrap=True)

    def window(self, seconds: float) -> Callable[[float, int], None]:
        progress = self._start(TextColumn("{task.description}", markup=False), BarColumn(),
                               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
        task = progress.add_task("capturing", total=seconds)

        def update(elapsed: float, statements: int) -> None:
            progress.update(task, completed=elapsed,
                            description=f"capturing: {statements:,} statements")
        return update

    def dumping(self, total: int) -> Callable[[int], None]:
        progress = self._start(TextColumn("{task.description}", markup=False), BarColumn(),
                               DownloadColumn(), TransferSpeedColumn(), TimeElapsedColumn())
        task = progress.add_task("dumping", total=total)

        def update(done: int) -> None:
            progress.update(task, completed=done, total=max(total, done))
        return update

    def _start(self, *columns: Any) -> Progress:
        self.close()
        self.progress = Progress(*columns, console=console, transient=False)
        self.progress.start()
        return self.progress

    def close(self) -> None:
        if self.progress is not None and self.progress.live.is_started:
            self.progress.stop()
        self.progress = None


class VerifyConsole:
    """Shows a verify: a bar of its time (ETA) with the window measured now, then the table
    of A's and B's figures."""

    def __init__(self) -> None:
        self.bar: Progress | None = None

    def message(self, text: str) -> None:
        console.print(literal(text), markup=False, highlight=False, soft_wrap=True)

    def progress(self, total: float) -> Callable[[float, str], None]:
        self.close()
        self.bar = Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                            TimeElapsedColumn(), TextColumn("at most"), TimeRemainingColumn(),
                            console=console, transient=False)
        self.bar.start()
        task = self.bar.add_task("verifying", total=total)

        def update(elapsed: float, now: str) -> None:
            if self.bar is not None:
                self.bar.update(task, completed=elapsed, description=f"verifying: {now}")
        return update

    def close(self) -> None:
        if self.bar is not None and self.bar.live.is_started:
            self.bar.stop()
        self.bar = None



def stdout() -> terminal.Terminal:
    """What a command prints: every string shown literally (names, SQL, paths, values and the
    server's messages are never read as markup), and a closed or full stdout does not stop the
    command; it says so at its end (Terminal.check)."""
    return terminal.stdout()


def write_json(path: Path, document: str, stored: str) -> None:
    try:
        places.write_file(path, document, "--json")
    except UserError as exc:
        raise UserError(f"{exc}; {stored} with --json FILE") from None


def say_written(out: Console, written: list[Path], charts: list[Path]) -> None:
    if charts:
        out.print(f"charts: {', '.join(str(c) for c in charts)}", markup=False)
    page, *others = written  # in the order of knoblab.report.exporters: the page first
    out.print(f"report: {page} (and {', '.join(path.name for path in others)})", markup=False)
