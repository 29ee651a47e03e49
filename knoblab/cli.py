"""The knoblab command: argument parsing, progress display, and one line per user error."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import datetime as dt
import json
import os
import re
import shlex
import signal
import socket
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

_EARLY_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def _quit_quietly(signum: int, frame: object) -> None:
    for later in _EARLY_SIGNALS:  # one stop, one line, one exit code
        signal.signal(later, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.write(2, b"knoblab: interrupted while starting; nothing was begun\n")
    raise SystemExit(130)


# A signal while knoblab is still starting (importing what it needs) finds nothing begun:
# it exits with one line instead of a traceback from deep inside an import. main() then sets
# the handlers that stop a run cleanly.
if __name__ == "__main__" or Path(sys.argv[0]).name == "knoblab":
    for _signum in _EARLY_SIGNALS:
        signal.signal(_signum, _quit_quietly)

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
from rich.table import Column, Table
from rich.text import Text

from knoblab import places, recommend, terminal
from knoblab.connection import Endpoint
from knoblab.errors import STOP, UNWINDING, UserError, stop_here
from knoblab.literal import literal
from knoblab.server import sandbox
from knoblab.store import Store, default_url, hide_passwords
from knoblab.units import format_duration, parse_duration, plural
from knoblab.vocabulary import ComparisonVerdict, Experiment, Finding, PointVerdict, RunStatus

if TYPE_CHECKING:
    from knoblab.compare import Comparison
    from knoblab.records import TrialOutcome, TuneResult
    from knoblab.stats import Direction
    from knoblab.workloads.base import Second

# Progress and messages: every string shown literally, and a closed or full stderr drops
# them rather than stopping a run (knoblab.terminal).
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


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit code 2, as for every bad input
        # the message may quote what was typed (an unrecognised argument): shown literally
        _say(f"knoblab: {message} (see: {self.prog} --help)")
        sys.exit(2)


# What each command needs of the home, and what is true of the store when it fails unforeseen.
_MEASURES = {"starts_servers": True, "writes_store": True,
             "after_crash": "what was measured is stored"}
_READS = {"starts_servers": False, "writes_store": False,
          "after_crash": "the store was only read, nothing was changed"}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="knoblab", description="Measure which MySQL/MariaDB settings are best "
                     "for your workload on your machine, and how sure that is.")
    parser.add_argument("--store", metavar="URL",
                        help="the results store: sqlite:///PATH (three slashes: PATH relative "
                             "to the current folder; sqlite:////tmp/k.sqlite is /tmp/k.sqlite) "
                             "or postgresql://USER@HOST/DATABASE (default: $KNOBLAB_STORE, "
                             "else knoblab.sqlite in $KNOBLAB_HOME, ~/.knoblab)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="run the experiment a spec file describes")
    run.add_argument("spec", type=Path, help="experiment spec (TOML)")
    _output_options(run, RUN_FOLDER)
    run.set_defaults(func=cmd_run, **_MEASURES)

    resume = sub.add_parser("resume", help="finish an interrupted run without repeating "
                            "what was measured")
    resume.add_argument("run_id")
    resume.add_argument("--budget", metavar="TIME",
                        help="a new budget for adaptive repetitions (e.g. 30m), counting what "
                             "was measured already: extends a run its budget stopped")
    _output_options(resume, RUN_FOLDER)
    resume.set_defaults(func=cmd_resume, **_MEASURES)

    search = sub.add_parser("tune", help="search several settings at once for the best "
                            "configuration, and validate it against the current one")
    search.add_argument("spec", type=Path, help="a spec with a [tune] section (TOML)")
    search.add_argument("--budget", metavar="TIME",
                        help="the study's time budget (e.g. 30m), counting earlier "
                             "invocations of the same study; overrides [tune] budget")
    _output_options(search, STUDY_FOLDER, "tune.json")
    search.set_defaults(func=cmd_tune, starts_servers=True, writes_store=True,
                        after_crash="the study's finished trials are stored")

    report = sub.add_parser("report", help="show the results of a run, or of a tuning study")
    report.add_argument("run_id", metavar="RUN",
                        help="a run (its id or a unique beginning of it), a tuning study "
                             "as study:NAME, or latest: the newest of them (a study's own "
                             "runs count as the study)")
    _output_options(report, f"{RUN_FOLDER}, or {STUDY_FOLDER} for a study",
                    "result.json; a study's: tune.json")
    report.set_defaults(func=cmd_report, **_READS)

    compare = sub.add_parser("compare", help="the same study in two runs (two machines, "
                             "versions, dates or base configurations), point by point")
    compare.add_argument("run_ids", nargs="+", metavar="RUN",
                         help="runs (ids, unique beginnings, or latest: the newest run "
                              "that is not a tuning study's); each is compared with the "
                              "first")
    compare.add_argument("--json", type=Path, metavar="FILE",
                         help="write the comparison as JSON here")
    compare.add_argument("--out", type=Path, metavar="DIR",
                         help="write the comparison's report here (report.html, report.md)")
    compare.set_defaults(func=cmd_compare, **_READS)

    restore = sub.add_parser("restore", help="put back settings a killed run left changed "
                             "on a running server")
    restore.add_argument("run_id", nargs="?", help="only this run's (default: every run's)")
    restore.add_argument("--forget", action="store_true",
                         help="stop tracking them without touching the server (after putting "
                         "them back by hand); their original values are printed")
    restore.set_defaults(func=cmd_restore, starts_servers=False, writes_store=True,
                         after_crash="what was not put back is still recorded: run knoblab "
                                     "restore again")

    capture = sub.add_parser("capture", help="capture a running server's statements (its "
                             "general or slow log, for a window) and its data, with a spec "
                             "to tune them")
    capture.add_argument("spec", type=Path, help="a spec whose [server] names a running server")
    capture.add_argument("--for", dest="window", required=True, metavar="TIME",
                         help="how long to capture (e.g. 10m); Ctrl-C ends it early")
    capture.add_argument("--out", dest="capture_out", type=Path, required=True, metavar="DIR",
                         help="where the statements, the dump and the spec go: a new or "
                              "empty folder, or an earlier capture's (its files are replaced)")
    capture.add_argument("--data", default="schema", metavar="schema|all|sample=N",
                         help="what the dump takes: the tables' definitions (default), every "
                              "row, or at most N rows per table")
    capture.add_argument("--log", dest="capture_log", default="auto",
                         choices=("auto", "general", "slow"),
                         help="the server's log the statements are taken from: the general "
                              "log sees every connection, those open before the window too; "
                              "the slow log times each statement but sees only connections "
                              "opened during the window; auto (default): the slow log when no "
                              "other connection is open as the window begins, else the general")
    capture.add_argument("--reconnect", choices=("idle",),
                         help="idle: end each connection open before the window once it is "
                              "idle with no transaction that locked or wrote, one at a time, "
                              "for its pool to reconnect inside the window (a pool that "
                              "prepared its statements before it is otherwise captured "
                              "without their values); stops at the first its pool does not "
                              "replace")
    capture.set_defaults(func=cmd_capture, starts_servers=False, writes_store=True,
                         after_crash="every setting it changed was put back, or is recorded "
                                     "for knoblab restore")

    verify = sub.add_parser("verify", help="check a recommendation on the running server "
                            "itself, under its own load: its own values and the "
                            "recommendation's alternate in windows until the difference is "
                            "decided, with guard rails; every setting is put back")
    verify.add_argument("spec", type=Path, help="a spec whose [server] names a running server")
    verify.add_argument("--from", dest="source", required=True, metavar="PATH",
                        help="what to verify: a recommended.cnf, a knoblab tune or run report "
                             "folder holding one, or study:NAME")
    verify.add_argument("--for", dest="verify_for", default="20m", metavar="TIME",
                        help="the most it takes (default 20m); it ends sooner once decided")
    verify.add_argument("--window", default="60s", metavar="TIME",
                        help="how long each window measures (default 60s)")
    verify.add_argument("--settle", default="20s", metavar="TIME",
                        help="left out of the figures after each switch (default 20s)")
    verify.add_argument("--json", type=Path, metavar="FILE",
                        help="write the answer and every window's figures here (JSON)")
    verify.add_argument("--out", type=Path, metavar="DIR",
                        help="the report folder: report.html and report.md, with a chart of "
                             "the windows over time")
    verify.add_argument("--guard-latency", type=float, default=2.0, metavar="X",
                        help="put production's values back when the recommendation's mean "
                             "statement latency exceeds X times production's (default 2)")
    verify.add_argument("--guard-running", type=float, default=3.0, metavar="X",
                        help="... when Threads_running exceeds X times production's, plus 2 "
                             "(default 3)")
    verify.add_argument("--guard-errors", type=float, default=1.0, metavar="N",
                        help="... when errors a second exceed production's rate by N "
                             "(default 1)")
    verify.set_defaults(func=cmd_verify, starts_servers=False, writes_store=True,
                        after_crash="every setting it changed was put back, or is recorded "
                                    "for knoblab restore")

    runs = sub.add_parser("runs", help="list recent runs and tuning studies, newest first "
                          "(a study is one row; its own runs with --study)")
    runs.add_argument("--name", help="only runs and studies whose name contains this")
    runs.add_argument("--study", metavar="NAME",
                      help="the runs of this tuning study: its trials, validations and "
                           "reductions")
    runs.add_argument("--status", choices=RUN_STATES, help="only runs in this state")
    runs.add_argument("--limit", type=int, default=20, metavar="N",
                      help="at most N rows, runs and studies together (default 20; 0: all)")
    runs.set_defaults(func=cmd_runs, **_READS)

    knobs = sub.add_parser("knobs", help="list the server's settings: type, default, range, "
                           "whether a change needs a restart, scope and safety class")
    knobs.add_argument("pattern", nargs="?", help="part of the name, e.g. buffer")
    knobs.add_argument("--binary", help="server binary, a name on PATH or a path (default: "
                       "mariadbd, else mysqld, on PATH or in the usual sbin folders)")
    knobs.set_defaults(func=cmd_knobs, starts_servers=True, writes_store=False,
                       after_crash="nothing was changed")
    return parser


# Where a report folder goes without --out (the commands' own code: _show, studies.report_folder).
RUN_FOLDER = "knoblab-results/NAME-RUN"
STUDY_FOLDER = "knoblab-results/study-NAME"


def _output_options(parser: argparse.ArgumentParser, folder: str,
                    data: str = "result.json") -> None:
    parser.add_argument("--json", type=Path, metavar="FILE",
                        help=f"also write the results JSON (as in the folder's {data}) here")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="the report folder: report.html, report.md, the charts and data "
                             f"(default: {folder})")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # A closed terminal (HUP), a service manager (TERM), Ctrl-\ (QUIT): each stops knoblab as
    # Ctrl-C does, so servers are stopped and settings put back.
    _handle_stopping_signals()
    # Libraries' warnings (numerical precision, a glyph a font lacks, an experimental
    # feature) are notes for developers, printed with a source line: never in the user's
    # terminal. knoblab says what matters in its own words. (-W or PYTHONWARNINGS still apply.)
    if not sys.warnoptions:
        warnings.simplefilter("ignore")
    store: Store | None = None
    try:
        home = places.usable_home(os.environ.get("KNOBLAB_HOME"), writes=args.starts_servers)
        store = Store(args.store or os.environ.get("KNOBLAB_STORE") or default_url(home))
        _check_outputs(args, store, home)
        if args.writes_store:  # every measurement is stored the moment it exists: now, or never
            store.check_writable()
        return args.func(args, store, home)
    except UserError as exc:
        # Exactly one line, however long: scripts and CI logs grep for it.
        _say(f"knoblab: {' '.join(str(exc).split())}")
        return 2
    except KeyboardInterrupt:
        sandbox.stop_all()
        _say(f"knoblab: interrupted{_after_stop(args, store)}")
        return 130
    except Exception as exc:  # a failure nobody foresaw: one line here, the details in a file
        sandbox.stop_all()
        if STOP.is_set():
            # A stop that landed inside a library's C code comes out as that library's own
            # error (matplotlib: "Invalid affine transformation matrix"): the stop it was.
            _say(f"knoblab: interrupted{_after_stop(args, store)}")
            return 130
        log = _write_crash_log(exc)
        what = hide_passwords(" ".join(str(exc).split()))[:200] or "no message"
        _say(f"knoblab: unexpected error ({type(exc).__name__}: {what}); {args.after_crash}"
             f"{_settings_left(store)}; "
             f"the details are in {log} — please report it with that file")
        return 1
    finally:
        # The command has its one exit code: a stopping signal from now until the process is
        # gone changes nothing (see _interrupt), also after Python drops its handlers.
        _SIGNALLED["ended"] = True
        atexit.unregister(_ignore_stopping_signals)  # once, however often main() runs
        atexit.register(_ignore_stopping_signals)


def _say(line: str) -> None:
    # The terminal may be gone (SIGHUP) or stderr closed: the exit code still tells. The line
    # may name a path, a run or a server's message: shown literally, on one line.
    if sys.stderr is None:  # started with it closed: print() would write to stdout instead
        return
    with contextlib.suppress(OSError, ValueError):
        print(literal(line), file=sys.stderr, flush=True)


def _check_outputs(args: argparse.Namespace, store: Store, home: Path) -> None:
    """Every place the command will write to, checked before anything starts: usable, and
    none of the files knoblab relies on."""
    own: dict[Path, str] = {}
    if store.path is not None:
        own[store.path] = "knoblab's results store"
        own[store.path.with_name(store.path.stem + "-tune.sqlite")] = \
            "the storage of knoblab's tuning studies"
    if isinstance(getattr(args, "spec", None), Path):
        own[args.spec] = "the spec being run"
    out, json_file = getattr(args, "out", None), getattr(args, "json", None)
    if out is not None:
        places.output_folder(out, "--out")
        places.not_knoblabs_own(out, "--out", own, home)
        from knoblab.report.exporters import file_names

        places.check_report_folder(out, file_names())
    capture_out = getattr(args, "capture_out", None)
    if capture_out is not None:
        places.output_folder(capture_out, "--out")
        places.not_knoblabs_own(capture_out, "--out", own, home)
    if json_file is not None:
        places.output_file(json_file, "--json")
        places.not_knoblabs_own(json_file, "--json", own, home)
        if out is not None and json_file.resolve() == out.resolve():
            raise UserError(f"--json {json_file} is the --out folder; give the JSON a file name")


def _after_stop(args: argparse.Namespace, store: Store | None) -> str:
    """What a stopped command leaves, and the command that goes on from there."""
    if args.command == "tune":
        return ("; the study's finished trials are stored (go on with: knoblab tune "
                f"{shlex.quote(str(args.spec))}){_settings_left(store)}")
    if args.command in ("capture", "verify"):
        return _settings_left(store) or (
            "; every setting it changed was put back" if _own_run(store) else
            "; nothing was changed on the server")
    if args.command not in ("run", "resume"):
        return ""
    run_id = _own_run(store)
    if run_id is None:
        again = (f"knoblab run {shlex.quote(str(args.spec))}" if args.command == "run"
                 else f"knoblab resume {shlex.quote(args.run_id)}")
        return f" before anything was measured (start again with: {again})"
    return (f"; what was measured is stored (finish it with: knoblab resume {run_id})"
            f"{_settings_left(store)}")


def _settings_left(store: Store | None) -> str:
    """The settings this process's run left changed on a running server, as its journal
    holds them (a put-back that failed, or was cut short), with the command that puts them
    back; empty when none is left."""
    run_id = _own_run(store)
    if store is None or run_id is None:
        return ""
    try:
        pending = store.pending_restores(run_id)
    except Exception:  # the store may be what failed
        return f"; settings it changed may still be changed: see knoblab restore {run_id}"
    if not pending:
        return ""
    where = Endpoint.from_dict(pending[0]["server"]).describe()
    names = ", ".join(row["name"] for row in pending)
    return (f"; {names} still changed on {where}: put them back with: knoblab restore "
            f"{run_id}")


def _own_run(store: Store | None) -> str | None:
    """The run this process measured, if it got as far as creating one."""
    if store is None:
        return None
    with contextlib.suppress(Exception):  # the store may be what failed
        for run in store.list_runs(limit=50):
            owner = json.loads(run["info"] or "{}").get("owner") or {}
            if owner.get("pid") == os.getpid() and owner.get("host") == socket.gethostname():
                return str(run["id"])
    return None


def _write_crash_log(exc: Exception) -> Path:
    """The traceback and the command line (any password in a URL masked), under
    $KNOBLAB_HOME/logs — or, when that cannot be written, in the current folder, where the
    user looks — and the temp folder as a last resort."""
    command = " ".join(hide_passwords(arg) for arg in sys.argv)
    text = hide_passwords(f"{command}\n{dt.datetime.now().isoformat()}\n\n"
                          + "".join(traceback.format_exception(exc)))
    name = f"crash-{dt.datetime.now():%Y%m%d-%H%M%S}-{os.getpid()}.log"
    home = os.environ.get("KNOBLAB_HOME") or str(Path.home() / ".knoblab")
    for folder in (Path(home).expanduser() / "logs", Path.cwd(), Path(tempfile.gettempdir())):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            # undecodable bytes of a log or a name, as escapes: the details are never lost
            (folder / name).write_text(text, encoding="utf-8", errors="backslashreplace")
            return (folder / name).absolute()
        except OSError:
            continue
    return Path("(nowhere: no folder could be written)")


def cmd_run(args: argparse.Namespace, store: Store, home: Path) -> int:
    from knoblab.runner import start_run
    from knoblab.spec import load_spec

    spec = load_spec(args.spec)
    return _measure(lambda listener: start_run(spec, store, home, listener), args, store)


def cmd_tune(args: argparse.Namespace, store: Store, home: Path) -> int:
    from knoblab.machine import describe as describe_machine
    from knoblab.search import TuneOptions, tune
    from knoblab.spec import load_spec
    from knoblab.studies import Recorder

    spec = load_spec(args.spec)
    budget = None if args.budget is None else parse_duration(args.budget, "--budget")
    _warn_pending(store)
    # The study's row in the store (knoblab runs) and its runs tagged with its name; a spec
    # without [tune] is refused by tune itself.
    name = None if spec.tune is None else TuneOptions.from_spec(spec.tune, spec.name).study
    machine = describe_machine(home)
    console_listener = TuneConsole()
    listener = console_listener if name is None else \
        Recorder(store, name, spec.source, machine, console_listener)
    try:
        with store.measuring_for(name) if name is not None else contextlib.nullcontext():
            result = tune(spec, store, home, listener, budget=budget)
        if isinstance(listener, Recorder):
            listener.finished(result)
    except BaseException as exc:
        if isinstance(listener, Recorder):
            with contextlib.suppress(Exception):  # the store may be what failed
                listener.failed(exc)
        raise
    finally:
        console_listener.close()
    return _show_study(result, spec.source, {**machine, "server": result.server}, args,
                       "run knoblab tune again", store)


def _show_study(result: TuneResult, spec_source: str, machine: dict[str, str],
                args: argparse.Namespace, again: str, store: Store) -> int:
    """A study's report: in the terminal, and its folder (report, charts, tune.json,
    recommended.cnf); `again` is how to write it elsewhere."""
    from knoblab.report import exporters
    from knoblab.report.document import Report
    from knoblab.report.tune_charts import write_tune_charts
    from knoblab.report.tuning import print_tune, tune_document
    from knoblab.results import build_results
    from knoblab.studies import report_folder

    out = _stdout()
    # The run the recommendation's gain comes from: its statement classes say what got faster.
    claimed = recommend.claim(result) if recommend.settings(result) else None
    measured = None if claimed is None else build_results(store, claimed.run_id)
    print_tune(result, out, measured)
    folder = args.out or report_folder(result.study)
    if args.json:  # first: when it cannot be written, no half-written folder is left
        _write_json(args.json, exporters.search_json(result), f"the study is stored: {again}")
    try:
        exporters.claim_folder(folder)
        charts = write_tune_charts(result, folder)
        report = Report(tune_document(result, charts, spec_source, machine, measured),
                        search=result)
        _say_written(out, exporters.write(report, folder), charts)
    except OSError as exc:
        raise UserError(f"cannot write the results to {exc.filename or folder}: {exc.strerror}; "
                        f"the study is stored: {again} with --out DIR") from None
    except UserError as exc:
        raise UserError(f"{exc}; the study is stored: {again} with --out DIR") from None
    out.check(f"the study is stored, its report is in {folder}")
    return 0


def _write_json(path: Path, document: str, stored: str) -> None:
    try:
        places.write_file(path, document, "--json")
    except UserError as exc:
        raise UserError(f"{exc}; {stored} with --json FILE") from None


def _say_written(out: Console, written: list[Path], charts: list[Path]) -> None:
    if charts:
        out.print(f"charts: {', '.join(str(c) for c in charts)}", markup=False)
    page, *others = written  # in the order of knoblab.report.exporters: the page first
    out.print(f"report: {page} (and {', '.join(path.name for path in others)})", markup=False)


def cmd_resume(args: argparse.Namespace, store: Store, home: Path) -> int:
    from knoblab.runner import resume_run

    budget = None if args.budget is None else parse_duration(args.budget, "--budget")
    run = store.run(args.run_id)
    _not_a_capture(run, "is not resumed (capture or verify again)")
    stopped = (run["info"].get("stopped") or {}).get("reason")
    if run["status"] == RunStatus.DONE and (budget is None or stopped != "budget"):
        # Finished: resume_run says so (or refuses), measures nothing, and the report is not
        # printed again: where it is, in one line.
        resume_run(run["id"], store, home, ConsoleListener(), budget=budget)
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", run["name"]).strip(".-")[:60] or "run"
        folder = args.out or Path("knoblab-results") / f"{slug}-{run['id']}"  # as _show's
        out = _stdout()
        out.print(literal(f"its report is in {folder} (again: knoblab report {run['id']})"
                          if folder.is_dir() else
                          f"its report: knoblab report {run['id']} [--out DIR]"),
                  markup=False, highlight=False)
        out.check()
        return 0
    return _measure(lambda listener: resume_run(args.run_id, store, home, listener,
                                                budget=budget), args, store)


def _measure(action, args: argparse.Namespace, store: Store) -> int:
    _warn_pending(store)
    listener = ConsoleListener()
    try:
        run_id = action(listener)
    finally:
        listener.close()
    return _show(store, run_id, args)


def _warn_pending(store: Store) -> None:
    """A run killed while it had a running server's settings changed: say so at every start."""
    from knoblab.capturing import under_way

    by_run: dict[str, list[dict]] = {}
    pending = store.pending_restores()
    live = under_way(store, pending) if pending else {}  # they put their own back
    for row in pending:
        if row["run_id"] not in live:
            by_run.setdefault(row["run_id"], []).append(row)
    for run_id, rows in by_run.items():
        where = Endpoint.from_dict(rows[0]["server"]).describe()
        names = ", ".join(r["name"] for r in rows)
        console.print(f"knoblab: warning: run {run_id} left {names} changed on {where}; put "
                      f"them back with: knoblab restore {run_id}", style="yellow", markup=False)


def cmd_restore(args: argparse.Namespace, store: Store, home: Path) -> int:
    from knoblab.server.external import PutBack, forget_pending, restore_pending

    run_id = store.run(args.run_id)["id"] if args.run_id else None
    out = _stdout()
    if args.forget:
        forgotten = forget_pending(store, run_id)
        if not forgotten:
            out.print("nothing to forget: no run left a setting changed")
        for run, where, originals in forgotten:
            values = ", ".join(f"{name} (was {value})" for name, value in originals.items())
            out.print(literal(f"run {run}: no longer tracked on {where}: {values}"))
        # the original values exist nowhere else now: not seeing them is an error
        out.check("they are no longer tracked")
        return 0
    from knoblab.capturing import after_restore, under_way

    pending = store.pending_restores(run_id)
    servers = {row["run_id"]: row["server"] for row in pending}
    live = under_way(store, pending)
    for run, why in live.items():  # putting its settings back from under it would break it
        out.print(literal(f"run {run}: left alone, {why}: it puts its settings back itself "
                          "when it ends"))
    restored: list[tuple[str, str, PutBack]] = []
    problems: list[str] = []
    for run in servers:
        if run not in live:
            finished, failed = restore_pending(store, run)
            restored += finished
            problems += failed
    if not restored and not problems and not live:
        out.print("nothing to restore: no run left a setting changed")
    for run, where, put_back in restored:
        if put_back.restored:
            out.print(literal(f"run {run}: put back {', '.join(put_back.restored)} on {where} "
                              "(read back: at their original values)"))
        if put_back.left:
            out.print(literal(f"run {run}: on {where}, {put_back.said()}"))
        for said in after_restore(store, run, servers[run]):
            out.print(literal(f"run {run}: {said}"))
    if problems:
        raise UserError("; ".join(problems))
    out.check("they were put back")
    return 0


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


def cmd_capture(args: argparse.Namespace, store: Store, home: Path) -> int:
    from knoblab.capturing import Request, capture
    from knoblab.server.dumping import parse_data

    request = Request(spec=args.spec, out=args.capture_out,
                      seconds=parse_duration(args.window, "--for"), data=parse_data(args.data),
                      log=args.capture_log, reconnect=args.reconnect == "idle")
    view = CaptureConsole()
    try:
        return capture(request, store, view, _rearm)
    finally:
        view.close()


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


def cmd_verify(args: argparse.Namespace, store: Store, home: Path) -> int:
    from knoblab.verifying import Guard, Request, verify

    for name in ("guard_latency", "guard_running"):
        if not getattr(args, name) > 1:
            raise UserError(f"--{name.replace('_', '-')} {getattr(args, name)}: give a "
                            "multiple of production's figure above 1, e.g. 2")
    if not args.guard_errors >= 0:
        raise UserError(f"--guard-errors {args.guard_errors}: give errors a second, 0 or more")
    request = Request(spec=args.spec, source=args.source,
                      seconds=parse_duration(args.verify_for, "--for"),
                      window=parse_duration(args.window, "--window"),
                      settle=parse_duration(args.settle, "--settle"),
                      guard=Guard(args.guard_latency, args.guard_running, args.guard_errors))
    if request.window < 5:
        raise UserError(f"--window {args.window}: a window needs 5 s or more to average the "
                        "server's counters over")
    if request.settle < 2:
        raise UserError(f"--settle {args.settle}: give 2 s or more (the guard's first "
                        "reference of production is taken then)")
    if args.out is not None:  # before anything changes: a folder it cannot write is refused
        from knoblab.report import exporters

        exporters.claim_folder(args.out)
    view = VerifyConsole()
    try:
        result = verify(request, store, view)
    finally:
        view.close()
    _show_verify(result, args.json, args.out, store.run(result["run"])["spec_source"],
                 shlex.join(["knoblab", "verify", *sys.argv[2:]]))
    return 0


def _show_verify(result: dict[str, Any], json_file: Path | None, folder: Path | None,
                 spec: str, command: str) -> None:
    """A verify's answer: the table of A's and B's figures, its sentence, what was put back;
    its JSON and its report folder where asked."""
    from knoblab.report.verification import (
        DIGEST_COLUMNS,
        change_text,
        digest_rows,
        figure_rows,
        number,
    )

    out = _stdout()
    table = Table(title="production under its own load, A against B (the means of their "
                        "windows)", title_justify="left")
    for column in ("figure", "A: production's own", "B: recommended", "change"):
        table.add_column(column, justify="left" if column == "figure" else "right")
    for row in figure_rows(result):
        table.add_row(row["figure"], number(row["a"]), number(row["b"]), change_text(row))
    out.print(table)
    digests = digest_rows(result)[:5]
    if digests:
        by_digest = Table(title="the statements run most (performance_schema)",
                          title_justify="left")
        for i, column in enumerate(DIGEST_COLUMNS):
            by_digest.add_column(column, justify="left" if i == 0 else "right")
        for cells in digests:
            by_digest.add_row(*cells)
        out.print(by_digest)
    out.print(Text(literal(result["said"])))
    if result.get("put_back"):
        out.print(Text(literal(f"{result['put_back']} on {result['server']}")))
    again = f"the verify is stored: knoblab report {result['run']}"
    if json_file is not None:
        _write_json(json_file, json.dumps(result, indent=2), again)
    if folder is not None:
        from knoblab.report import exporters
        from knoblab.report.document import Report
        from knoblab.report.verification import verify_document, write_chart

        try:
            exporters.claim_folder(folder)
            charts = [write_chart(result, folder / "verify-windows.png")] \
                if result.get("windows") else []
            page = verify_document(result, charts, spec, command)
            _say_written(out, exporters.write(Report(page), folder), charts)
        except OSError as exc:
            raise UserError(f"cannot write the report to {exc.filename or folder}: "
                            f"{exc.strerror}; {again} --out DIR") from None


def _rearm() -> None:
    """After a first signal was taken to end a capture's window: the next one stops the
    command again (the settings it could have cut short are back by then)."""
    STOP.clear()
    UNWINDING.clear()
    _SIGNALLED["stopping"] = False


def cmd_report(args: argparse.Namespace, store: Store, home: Path) -> int:
    from knoblab.studies import PREFIX, latest, stored_result

    # latest: the newest run of its own or study, whichever knoblab did last
    wanted = latest(store) if args.run_id == "latest" else args.run_id
    if wanted.startswith(PREFIX):
        # The study's report as knoblab tune wrote it, from what the store kept: nothing is
        # measured again.
        name = wanted[len(PREFIX):]
        result, study = stored_result(store, name)
        machine = {**study["info"].get("machine", {}), "server": result.server}
        return _show_study(result, study["spec_source"], machine, args,
                           f"knoblab report {shlex.quote(wanted)}", store)
    try:
        run = store.run(wanted)
    except UserError:
        if store.study(args.run_id) is not None:
            raise UserError(f"{args.run_id!r} is a tuning study, not a run: its report is "
                            f"knoblab report {shlex.quote(PREFIX + args.run_id)}") from None
        raise
    if run["kind"] == Experiment.VERIFY:
        answer = run["info"].get("verify")
        if answer is None:
            raise UserError(f"run {run['id']} is a verify that did not end: its windows are "
                            "in the store, its answer was never made; verify again")
        _show_verify(answer, args.json, args.out, run["spec_source"],
                     f"knoblab report {run['id']}")
        return 0
    _not_a_capture(run, "has no report")
    return _show(store, run["id"], args)


def _not_a_capture(run: dict[str, Any], what: str) -> None:
    if run["kind"] == Experiment.VERIFY:
        said = ((run["info"].get("verify") or {}).get("said")
                or "it did not end: its windows are in the store")
        raise UserError(f"run {run['id']} is a verify (knoblab verify), which {what}: "
                        f"{said}; knoblab report {run['id']} shows it")
    if run["kind"] == Experiment.CAPTURE:
        folder = (run["info"].get("dataset") or {}).get("folder") or "the folder it wrote"
        raise UserError(f"run {run['id']} is a capture (knoblab capture), which measured "
                        f"nothing and {what}: its statements, data and spec are in {folder}; "
                        "tune them with knoblab tune FOLDER/spec.toml")


def _show(store: Store, run_id: str, args: argparse.Namespace) -> int:
    from knoblab.report import exporters, print_report, write_charts
    from knoblab.report.document import Report, build_document
    from knoblab.results import build_results

    results = build_results(store, run_id)
    out = _stdout()
    print_report(results, out)
    for warning in results.warnings:
        out.print(f"warning: {warning}", style="yellow", markup=False)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", results.name).strip(".-")[:60] or "run"
    folder = args.out or Path("knoblab-results") / f"{slug}-{run_id}"
    if args.json:  # first: when it cannot be written, no half-written folder is left
        _write_json(args.json, exporters.results_json(results),
                    f"the run is stored: knoblab report {run_id}")
    try:
        exporters.claim_folder(folder)
        charts = write_charts(results, folder) if any(p.n for p in results.points) else []
        report = Report(build_document(results, charts), results=results,
                        trials=store.trials(run_id))
        _say_written(out, exporters.write(report, folder), charts)
    except OSError as exc:
        raise UserError(f"cannot write the results to {exc.filename or folder}: {exc.strerror}; "
                        f"the run is stored, write them elsewhere with: knoblab report {run_id} "
                        "--out DIR") from None
    except UserError as exc:
        raise UserError(f"{exc}; the run is stored: knoblab report {run_id} --out DIR") \
            from None
    out.check(f"the run is stored, its report is in {folder}")
    if all(p.verdict == PointVerdict.FAILED for p in results.points):
        raise UserError("every configuration failed; see the errors above")
    # Most measurements failed: the report stands on the few left, and the exit code says so.
    failed = sum(p.failed for p in results.points)
    measured = sum(p.n for p in results.points)
    if 2 * failed > failed + measured:
        raise UserError(f"{failed} of {plural(failed + measured, 'measurement')} failed; the "
                        f"results above rest on the remaining {measured} — see the errors "
                        "above")
    return 0


def cmd_compare(args: argparse.Namespace, store: Store, home: Path) -> int:
    from knoblab.compare import change_header, compare_runs
    from knoblab.report.format import num, ratio_change_text
    from knoblab.words import WHY_NOT_BOUNDED, bounded

    comparisons = compare_runs(store, args.run_ids)
    out = _stdout()
    for c in comparisons:
        a, b = c.first.run_id, c.other.run_id
        unit = c.first.objective.unit
        out.print(Text(literal(f"{c.first.name}: run {b} against run {a} "
                               f"({c.first.objective.centre} {unit})"), style="bold"))
        for line in c.incomplete:  # compared as far as it was measured, and said first
            out.print(Text(literal(f"warning: {line}"), style="yellow"))
        table = Table("configuration", f"in {a}", f"in {b}", change_header(c), "p (Holm)",
                      "verdict")
        for row in c.rows:
            change = "—" if row.change is None else ratio_change_text(
                row.change.ratio, row.change.ci_low, row.change.ci_high)
            p = "—" if row.p_adjusted is None else f"{row.p_adjusted:.2g}"
            style = {ComparisonVerdict.DIFFERS: "red", ComparisonVerdict.SAME: "green",
                     ComparisonVerdict.INCONCLUSIVE: "yellow"}.get(row.verdict, "dim")
            table.add_row(row.label, num(row.first), num(row.other), change, p,
                          Text(row.verdict, style=style))
        out.print(table)
        if any(r.change is not None and not bounded(r.change.ci_low, r.change.ci_high)
               for r in c.rows):
            out.print(Text(literal(f"{WHY_NOT_BOUNDED}.")))
        out.print(Text(literal(_agreement(c))))
        for name, labels in ((a, c.only_first), (b, c.only_other)):
            if labels:
                out.print(Text(literal(f"Only in {name}: {'; '.join(labels)}"), style="dim"))
        out.print(Text(literal("What differs between them: " + (
            "; ".join(c.machine) or "nothing recorded (same machine, server and base "
                                    "configuration)"))))
        if c.spec:
            out.print(Text("Their specs differ:", style="bold"))
            for line in c.spec:
                out.print(Text(literal(f"  {line}"),
                               style="green" if line.startswith("+") else "red"))
        out.print()
    if args.json:
        document = [{"first": c.first.run_id, "other": c.other.run_id, "agree": c.agree,
                     # best: only what a run recommends; fastest: its leader shown better
                     # than another, with its verdict ("best" or "fastest measured")
                     "best": {run: label if verdict == PointVerdict.BEST else None
                              for run, label, verdict in _leaders(c)},
                     "fastest": {run: None if label is None else
                                 {"configuration": label, "verdict": verdict}
                                 for run, label, verdict in _leaders(c)},
                     "rows": [{"configuration": r.label, "first": r.first, "other": r.other,
                               "ratio": None if r.change is None else r.change.ratio,
                               "ci95": None if r.change is None else
                               [r.change.ci_low, r.change.ci_high],
                               # the level of "ci95" (the key's name kept for programs)
                               "confidence": c.first.statistics.confidence,
                               "p_value": r.p_adjusted, "verdict": r.verdict}
                              for r in c.rows],
                     "machine": c.machine, "spec": c.spec, "incomplete": c.incomplete}
                    for c in comparisons]
        places.write_file(args.json, json.dumps(document, indent=2), "--json")
    from knoblab.report.tables import print_movement, runs_movement

    runs = [comparisons[0].first, *(c.other for c in comparisons)]
    print_movement(runs_movement(runs), out)
    if args.out:
        from knoblab.report import exporters
        from knoblab.report.document import Report, compare_document

        try:
            exporters.claim_folder(args.out)
            page = compare_document(comparisons, [_agreement(c) for c in comparisons])
            _say_written(out, exporters.write(Report(page), args.out), [])
        except OSError as exc:
            raise UserError(f"cannot write the comparison to {exc.filename or args.out}: "
                            f"{exc.strerror}; give a writable folder with --out") from None
    out.check(f"the comparison is in {args.json}" if args.json else "")
    return 0


def _leaders(c: Comparison) -> list[tuple[str, str | None, PointVerdict | None]]:
    """Each run's leader shown better than another configuration, and its verdict."""
    return [(c.first.run_id, c.best_first, c.verdict_first),
            (c.other.run_id, c.best_other, c.verdict_other)]


def _agreement(c: Comparison) -> str:
    a, b = c.first.run_id, c.other.run_id
    from knoblab.words import FINDING_WORDS, finding_text

    differ = sum(r.verdict == ComparisonVerdict.DIFFERS for r in c.rows)
    same = sum(r.verdict == ComparisonVerdict.SAME for r in c.rows)
    unshown = sum(r.verdict == ComparisonVerdict.INCONCLUSIVE for r in c.rows)
    counts = (f"Of {plural(len(c.rows), 'configuration')}, {differ} shown to differ between "
              f"the runs, {same} {finding_text(Finding.SAME, c.first.statistics.min_effect)}, "
              f"{unshown} {FINDING_WORDS[Finding.UNSHOWN]}.")
    def leader(label: str | None, verdict: PointVerdict | None) -> str:
        # its verdict as its own report says it: best only where the run recommends it
        if label is None or verdict is None:
            return "none shown better than the others"
        return f"{label} ({verdict})"

    if c.agree and c.best_first is not None:
        found = "best" if c.verdict_first == PointVerdict.BEST else f"the {c.verdict_first}"
        best = f"Both find {c.best_first} {found}."
    elif c.agree:
        best = "Neither finds a configuration shown better than the others."
    else:
        best = (f"They disagree on the leader: {leader(c.best_first, c.verdict_first)} in {a}, "
                f"{leader(c.best_other, c.verdict_other)} in {b}.")
    return f"{best} {counts}"


# plain words, as argparse names a wrong --status choice by its repr()
RUN_STATES = tuple(state.value for state in RunStatus)


def cmd_runs(args: argparse.Namespace, store: Store, home: Path) -> int:
    from knoblab.runner import run_state
    from knoblab.server.cgroups import reap_left_behind
    from knoblab.store import study_of
    from knoblab.studies import PREFIX, describe

    if args.limit < 0:
        raise UserError(f"--limit {args.limit}: give a number of runs, or 0 for all")
    # The control groups of a knoblab killed with -9 (its servers died with it) go here too,
    # as at a run's start, since runs lists that run as killed; the home is not touched.
    removed = reap_left_behind(sandbox.alive)
    if removed:
        terminal.stderr().print(f"removed {removed} control group{'s' if removed > 1 else ''} "
                                "left by a killed knoblab")
    # And its sandboxes' folders (each a copy of the data), which a run's start would reap;
    # a listing never fails for what it could not remove.
    with contextlib.suppress(OSError):
        if reclaimed := _reap_sandboxes(home):
            terminal.stderr().print(literal(reclaimed))
    out = _stdout()
    # A name and an answer are wrapped whole, never cut: they are what a row is read for.
    table = Table("run", Column("name", no_wrap=True, overflow="fold"), "kind", "status",
                  "server", "machine", "started", "took",
                  Column("result", overflow="fold", max_width=40))
    # A tuning study is one row; its runs (trials, validations, reductions: some 4 a trial)
    # are listed only with --study.
    rows: list[tuple[float, list[str]]] = []
    if args.study is None:
        for study in store.studies(name=args.name):
            state = _study_state(study)
            if args.status and state != args.status:
                continue
            info = study["info"]
            end = study["finished_at"] or (time.time() if state == RunStatus.RUNNING else None)
            took = info.get("spent") if state == RunStatus.DONE else \
                (None if end is None else end - study["created_at"])
            rows.append((study["created_at"], [
                "study", literal(study["name"]), "tune",
                "killed (knoblab tune again)" if state == RunStatus.KILLED else state,
                literal(info.get("server") or ""), _machine_text(study["host"], info),
                _when(study["created_at"]), "—" if took is None else format_duration(took),
                literal(describe(study))]))
            if args.limit and len(rows) == args.limit:
                break
    # a run's state is read from its owner process, so it is filtered here, not in SQL
    shown = 0
    for run in store.each_run(args.name):
        info = json.loads(run["info"] or "{}")
        if study_of(info) != args.study:
            continue
        state = run_state({**run, "info": info})
        if args.status and state != args.status:
            continue
        end = run["finished_at"] or (time.time() if state == RunStatus.RUNNING else None)
        took = "—" if end is None else format_duration(end - run["created_at"])
        kind = run["kind"] if not Experiment(run["kind"]).has_points else \
            f"{run['kind']} · {(info.get('workload') or {}).get('kind', 'query')}"
        rows.append((run["created_at"], [
            run["id"], literal(run["name"]), kind,  # one line each
            state if state != RunStatus.KILLED else "killed (knoblab restore)"
            if not Experiment(run["kind"]).has_points else "killed (knoblab resume)",
            literal(run["server_version"] or ""), _machine_text(run["host"], info),
            _when(run["created_at"]), took,
            literal(_answer(store, run["id"]))
            if state == RunStatus.DONE and Experiment(run["kind"]).has_points
            else literal((info.get("verify") or {}).get("said") or "")]))
        shown += 1
        if args.limit and shown == args.limit:
            break
    rows.sort(key=lambda row: row[0], reverse=True)
    for _, cells in rows[:args.limit or None]:
        table.add_row(*cells)
    if not rows:
        wanted = " ".join(f"{what} {value!r}" for what, value in
                          (("of study", args.study), ("named like", args.name),
                           ("with status", args.status)) if value)
        if args.study is not None and store.study(args.study) is None:
            known = [s["name"] for s in store.studies()]
            wanted += f" (no such study; studies: {', '.join(known[:5])})" if known else \
                " (no such study in the store)"
        out.print(literal(f"no runs {wanted}" if wanted else "no runs yet"))
    else:
        out.print(table)
        if args.study is None and any(cells[0] == "study" for _, cells in rows):
            out.print("a study's own runs: knoblab runs --study NAME; its report: knoblab "
                      f"report {PREFIX}NAME")
    out.check()
    return 0


def _reap_sandboxes(home: Path) -> str:
    """The folders of sandboxes whose knoblab is gone (a kill -9 leaves its copy of the data
    behind) and the templates it was building, removed as a run's start removes them, never
    a live run's; what that freed, in words ("" when nothing was left)."""
    found = {folder: _bytes_under(folder) + (_bytes_under(data_root) if (
                 data_root := Path(owner.get("data_root") or "")).name ==
                 f"knoblab-{folder.name}" else 0)
             for folder, owner in sandbox.left_behind(home)}
    if not found:
        return ""
    stopped = sandbox.reap_orphans(home)
    gone = [folder for folder in found if not folder.exists()]
    if not gone:
        return ""
    freed = sum(found[folder] for folder in gone)
    size = f"{freed / 1e6:,.0f} MB" if freed >= 1e6 else f"{freed / 1e3:,.0f} KB"
    return (f"removed {plural(len(gone), 'folder')} left by a killed knoblab under {home} "
            f"(its sandboxes' copies of the data, or templates it was building: {size} freed"
            + (f"; {stopped} of their servers still ran, and were stopped" if stopped else "")
            + ")")


def _bytes_under(folder: Path) -> int:
    """The bytes of the files under `folder` (0 for none, or a file gone meanwhile)."""
    total = 0
    for place, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(place, name)).st_size
    return total


def _answer(store: Store, run_id: str) -> str:
    """A finished run's answer for its row: its best value, or that the values do not
    differ (knoblab.report.text.answer_text), judged from the store as its report is."""
    from knoblab.report.text import answer_text
    from knoblab.results import build_results

    try:
        return answer_text(build_results(store, run_id))
    except Exception:  # noqa: BLE001 - one run's unreadable rows must not hide the others
        return "—"


def _study_state(study: dict[str, Any]) -> str:
    """A study's status, with "killed" for one left searching by a process now gone."""
    owner = study["info"].get("owner") or {}
    if study["status"] == RunStatus.RUNNING and owner.get("host") == socket.gethostname() and \
            not sandbox.alive(int(owner.get("pid") or 0)):
        return RunStatus.KILLED
    return str(study["status"])


def _when(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M")


def _machine_text(host: str | None, info: dict[str, Any]) -> str:
    machine = info.get("machine") or {}
    shape = ", ".join(v for v in (f"{machine['cores']} cores" if machine.get("cores")
                                  else "", machine.get("memory", "")) if v)
    return literal(f"{host} ({shape})" if shape else host or "")


def cmd_knobs(args: argparse.Namespace, store: Store, home: Path) -> int:
    from knoblab.safety import safety_class
    from knoblab.server.binary import find_binary

    catalog = sandbox.catalog_for(find_binary(args.binary), home)
    knobs = catalog.matching(args.pattern)
    if not knobs:
        raise UserError(f"no setting of {catalog.server_version} matches {args.pattern!r}")
    table = Table("name", "type", "default", "allowed", "change", "scope", "class",
                  title=f"{plural(len(knobs), 'setting')} of {catalog.server_version}")
    for knob in knobs:
        table.add_row(knob.name, knob.type.lower(), knob.default or "", knob.describe_range(),
                      "dynamic" if knob.dynamic else "restart", knob.scope.lower(),
                      safety_class(knob.name))
    out = _stdout()
    out.print(table)
    out.check()
    return 0


def _stdout() -> terminal.Terminal:
    """What a command prints: every string shown literally (names, SQL, paths, values and the
    server's messages are never read as markup), and a closed or full stdout does not stop the
    command; it says so at its end (Terminal.check)."""
    return terminal.stdout()


STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def _handle_stopping_signals() -> None:
    STOP.clear()
    UNWINDING.clear()
    _SIGNALLED.update(stopping=False, ended=False)
    for signum in STOPPING_SIGNALS:
        signal.signal(signum, _interrupt)
    signal.signal(signal.SIGALRM, _interrupt_again)
    sys.unraisablehook = _unraisable


def _interrupt(signum: int, frame: object) -> None:
    """The first signal stops the run where it is; later ones only make the clean-up hurry
    (servers are killed instead of shut down), so that a second Ctrl-C cannot break off the
    clean-up itself and leave a server, its directory or a changed setting behind. Once the
    command has its exit code, signals are absorbed.

    A handler may run inside itself (a signal on the heels of another), so it decides on
    plain flags, never on a lock: setting an Event takes one, and the handler that
    interrupted the setting would wait for it forever."""
    if _SIGNALLED["ended"]:
        return
    if _SIGNALLED["stopping"] or STOP.is_set():
        sandbox.hurry()
        return
    _SIGNALLED["stopping"] = True
    STOP.set()
    stop_here()


# Read and written by the signal handler alone (and reset when main() starts).
_SIGNALLED = {"stopping": False, "ended": False}


def _ignore_stopping_signals() -> None:
    """At exit, before Python gives the signals back to their defaults (where a late TERM
    would kill the process and turn a clean stop into "killed"): ignored ones stay ignored."""
    signal.setitimer(signal.ITIMER_REAL, 0)
    for signum in STOPPING_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def _unraisable(unraisable: sys.UnraisableHookArgs) -> None:
    """A stop that landed in a finaliser, where Python drops exceptions: say nothing and raise
    it again in a moment, outside the finaliser, rather than wait for the measurement to end."""
    if issubclass(unraisable.exc_type, KeyboardInterrupt) and STOP.is_set():
        UNWINDING.clear()
        signal.setitimer(signal.ITIMER_REAL, 0.01)
        return
    sys.__unraisablehook__(unraisable)


def _interrupt_again(signum: int, frame: object) -> None:
    if STOP.is_set() and not UNWINDING.is_set():
        stop_here()


if __name__ == "__main__":
    sys.exit(main())
