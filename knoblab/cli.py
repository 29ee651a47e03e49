"""The knoblab command: its arguments, and one line per user error. A command imports what it
uses once its arguments are parsed (knoblab.commands, knoblab.listings): `knoblab --help`
and a mistyped option answer at once."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib
import json
import os
import shlex
import signal
import socket
import sys
import tempfile
import traceback
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

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

from knoblab import places, stopping
from knoblab.errors import STOP, UserError
from knoblab.literal import literal
from knoblab.vocabulary import RunStatus

if TYPE_CHECKING:
    from knoblab.store import Store


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
    run.set_defaults(func=("commands", "cmd_run"), **_MEASURES)

    resume = sub.add_parser("resume", help="finish an interrupted run without repeating "
                            "what was measured")
    resume.add_argument("run_id", help="the run to finish: its id, a unique beginning of it, "
                        "or latest (knoblab runs lists them)")
    resume.add_argument("--budget", metavar="TIME",
                        help="a new budget for adaptive repetitions (e.g. 30m), counting what "
                             "was measured already: extends a run its budget stopped")
    _output_options(resume, RUN_FOLDER)
    resume.set_defaults(func=("commands", "cmd_resume"), **_MEASURES)

    search = sub.add_parser("tune", help="search several settings at once for the best "
                            "configuration, and validate it against the current one")
    search.add_argument("spec", type=Path, help="a spec with a [tune] section (TOML)")
    search.add_argument("--budget", metavar="TIME",
                        help="the study's time budget (e.g. 30m), counting earlier "
                             "invocations of the same study; overrides [tune] budget")
    _output_options(search, STUDY_FOLDER, "tune.json")
    search.set_defaults(func=("commands", "cmd_tune"), starts_servers=True, writes_store=True,
                        after_crash="the study's finished trials are stored")

    report = sub.add_parser("report", help="show the results of a run, or of a tuning study")
    report.add_argument("run_id", metavar="RUN",
                        help="a run (its id or a unique beginning of it), a tuning study "
                             "as study:NAME, or latest: the newest of them (a study's own "
                             "runs count as the study)")
    _output_options(report, f"{RUN_FOLDER}, or {STUDY_FOLDER} for a study",
                    "result.json; a study's: tune.json")
    report.set_defaults(func=("commands", "cmd_report"), **_READS)

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
    compare.set_defaults(func=("listings", "cmd_compare"), **_READS)

    restore = sub.add_parser("restore", help="put back settings a killed run left changed "
                             "on a running server")
    restore.add_argument("run_id", nargs="?", help="only this run's (default: every run's)")
    restore.add_argument("--forget", action="store_true",
                         help="stop tracking them without touching the server (after putting "
                         "them back by hand); their original values are printed")
    restore.set_defaults(func=("commands", "cmd_restore"), starts_servers=False, writes_store=True,
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
    capture.set_defaults(func=("commands", "cmd_capture"), starts_servers=False, writes_store=True,
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
    verify.set_defaults(func=("commands", "cmd_verify"), starts_servers=False, writes_store=True,
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
    runs.set_defaults(func=("listings", "cmd_runs"), **_READS)

    knobs = sub.add_parser("knobs", help="list the server's settings: type, default, range, "
                           "whether a change needs a restart, scope and safety class")
    knobs.add_argument("pattern", nargs="?", help="part of the name, e.g. buffer")
    knobs.add_argument("--binary", help="server binary, a name on PATH or a path (default: "
                       "mariadbd, else mysqld, on PATH or in the usual sbin folders)")
    knobs.set_defaults(func=("listings", "cmd_knobs"), starts_servers=True, writes_store=False,
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


# plain words, as argparse names a wrong --status choice by its repr()
RUN_STATES = tuple(state.value for state in RunStatus)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # A closed terminal (HUP), a service manager (TERM), Ctrl-\ (QUIT): each stops knoblab as
    # Ctrl-C does, so servers are stopped and settings put back.
    stopping.handle_stopping_signals()
    # Libraries' warnings (numerical precision, a glyph a font lacks, an experimental
    # feature) are notes for developers, printed with a source line: never in the user's
    # terminal. knoblab says what matters in its own words. (-W or PYTHONWARNINGS still apply.)
    if not sys.warnoptions:
        warnings.simplefilter("ignore")
    store: Store | None = None
    try:
        from knoblab.store import Store, default_url

        home = places.usable_home(os.environ.get("KNOBLAB_HOME"), writes=args.starts_servers)
        store = Store(args.store or os.environ.get("KNOBLAB_STORE") or default_url(home))
        _check_outputs(args, store, home)
        if args.writes_store:  # every measurement is stored the moment it exists: now, or never
            store.check_writable()
        module, name = args.func
        command = getattr(importlib.import_module(f"knoblab.{module}"), name)
        return int(command(args, store, home))
    except UserError as exc:
        # Exactly one line, however long: scripts and CI logs grep for it.
        _say(f"knoblab: {' '.join(str(exc).split())}")
        return 2
    except KeyboardInterrupt:
        stopping.taken()
        _stop_servers()
        _say(f"knoblab: interrupted{_after_stop(args, store)}")
        return 130
    except Exception as exc:  # a failure nobody foresaw: one line here, the details in a file
        _stop_servers()
        if STOP.is_set():
            # A stop that landed inside a library's C code comes out as that library's own
            # error (matplotlib: "Invalid affine transformation matrix"): the stop it was.
            _say(f"knoblab: interrupted{_after_stop(args, store)}")
            return 130
        log = _write_crash_log(exc)
        what = _hide_passwords(" ".join(str(exc).split()))[:200] or "no message"
        _say(f"knoblab: unexpected error ({type(exc).__name__}: {what}); {args.after_crash}"
             f"{_settings_left(store)}; "
             f"the details are in {log} — please report it with that file")
        return 1
    finally:
        stopping.ended()


def _stop_servers() -> None:
    """Every sandbox this process started, stopped (none without the module that starts them)."""
    stop_all = getattr(sys.modules.get("knoblab.server.sandbox"), "stop_all", None)
    if stop_all is not None:
        stop_all()


def _hide_passwords(text: str) -> str:
    from knoblab.store import hide_passwords

    return hide_passwords(text)


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
    from knoblab.connection import Endpoint

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
    command = " ".join(_hide_passwords(arg) for arg in sys.argv)
    text = _hide_passwords(f"{command}\n{dt.datetime.now().isoformat()}\n\n"
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


if __name__ == "__main__":
    sys.exit(main())
