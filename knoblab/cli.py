"""The knoblab command: argument parsing, progress display, and one line per user error."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from knoblab.errors import UserError
from knoblab.server import sandbox
from knoblab.server.external import Endpoint
from knoblab.store import Store, default_url

if TYPE_CHECKING:
    from knoblab.workloads.sysbench import Second

console = Console(stderr=True)


class ConsoleListener:
    """Shows the run as it happens: a progress bar with ETA and a line per measurement."""

    def __init__(self) -> None:
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            console=console, transient=False,
        )
        self.task: int | None = None
        self.unit = "s"
        self.dataset_task: int | None = None

    def message(self, text: str) -> None:
        console.print(text, markup=False, highlight=False)

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
            shown = f"failed: {error}"
        else:
            shown = f"{value:,.1f} tps" if self.unit == "tps" else f"{value:.4f} s"
        console.print(f"  {label:<40} #{repetition + 1:<3} {shown}", markup=False,
                      highlight=False)
        if self.task is not None:
            self.progress.advance(self.task)

    def second(self, label: str, second: Second) -> None:
        # The live readout of a time-series run: the latest second's throughput.
        if self.task is not None:
            self.progress.update(self.task, description=(
                f"measuring  {label}  {second.t:>4.0f} s  {second.tps:>9,.0f} tps"))

    def close(self) -> None:
        if self.progress.live.is_started:
            self.progress.stop()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit code 2, as for every bad input
        print(f"knoblab: {message} (see: {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="knoblab", description="Measure which MySQL/MariaDB settings are best "
                     "for your workload on your machine, and how sure that is.")
    parser.add_argument("--store", help="results store: an SQLAlchemy URL "
                        "(default: sqlite in $KNOBLAB_HOME, ~/.knoblab)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="run the experiment a spec file describes")
    run.add_argument("spec", type=Path, help="experiment spec (TOML)")
    _output_options(run)
    run.set_defaults(func=cmd_run)

    resume = sub.add_parser("resume", help="finish an interrupted run without repeating "
                            "what was measured")
    resume.add_argument("run_id")
    _output_options(resume)
    resume.set_defaults(func=cmd_resume)

    report = sub.add_parser("report", help="show the results of a run")
    report.add_argument("run_id")
    _output_options(report)
    report.set_defaults(func=cmd_report)

    restore = sub.add_parser("restore", help="put back settings a killed run left changed "
                             "on a running server")
    restore.add_argument("run_id", nargs="?", help="only this run's (default: every run's)")
    restore.set_defaults(func=cmd_restore)

    runs = sub.add_parser("runs", help="list recent runs")
    runs.set_defaults(func=cmd_runs)

    knobs = sub.add_parser("knobs", help="list the server's settings: type, default, range")
    knobs.add_argument("pattern", nargs="?", help="part of the name, e.g. buffer")
    knobs.add_argument("--binary", help="server binary (default: mariadbd or mysqld on PATH)")
    knobs.set_defaults(func=cmd_knobs)
    return parser


def _output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the results JSON here")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="folder for the chart and results (default: knoblab-results/RUN)")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    home = sandbox.knoblab_home()
    try:
        store = Store(args.store or os.environ.get("KNOBLAB_STORE") or default_url(home))
        return args.func(args, store, home)
    except UserError as exc:
        # Exactly one line, however long: scripts and CI logs grep for it.
        print(f"knoblab: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # A second Ctrl-C while servers shut down forces them down at once.
        signal.signal(signal.SIGINT, _force_exit)
        sandbox.stop_all()
        console.print("knoblab: interrupted; what was measured is stored "
                      "(finish it with: knoblab resume RUN)", markup=False)
        return 130


def cmd_run(args: argparse.Namespace, store: Store, home: Path) -> int:
    from knoblab.runner import start_run
    from knoblab.spec import load_spec

    spec = load_spec(args.spec)
    return _measure(lambda listener: start_run(spec, store, home, listener), args, store)


def cmd_resume(args: argparse.Namespace, store: Store, home: Path) -> int:
    from knoblab.runner import resume_run

    return _measure(lambda listener: resume_run(args.run_id, store, home, listener), args, store)


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
    by_run: dict[str, list[dict]] = {}
    for row in store.pending_restores():
        by_run.setdefault(row["run_id"], []).append(row)
    for run_id, rows in by_run.items():
        where = Endpoint(**rows[0]["server"]).describe()
        names = ", ".join(r["name"] for r in rows)
        console.print(f"knoblab: warning: run {run_id} left {names} changed on {where}; put "
                      f"them back with: knoblab restore {run_id}", style="yellow", markup=False)


def cmd_restore(args: argparse.Namespace, store: Store, home: Path) -> int:
    from knoblab.server.external import restore_pending

    run_id = store.run(args.run_id)["id"] if args.run_id else None
    restored = restore_pending(store, run_id)
    if not restored:
        print("nothing to restore: no run left a setting changed")
    for run, where, names in restored:
        print(f"run {run}: put back {', '.join(names)} on {where}")
    return 0


def cmd_report(args: argparse.Namespace, store: Store, home: Path) -> int:
    return _show(store, store.run(args.run_id)["id"], args)


def _show(store: Store, run_id: str, args: argparse.Namespace) -> int:
    from knoblab.report import print_report, write_charts
    from knoblab.results import build_results

    result = build_results(store, run_id)
    out = _stdout()
    print_report(result, out)
    for warning in result["warnings"]:
        out.print(f"warning: {warning}", style="yellow", markup=False)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", result["name"]).strip(".-")[:60] or "run"
    folder = args.out or Path("knoblab-results") / f"{slug}-{run_id}"
    document = json.dumps(result, indent=2)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "result.json").write_text(document)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(document)
        if any(p["n"] for p in result["points"]):
            charts = write_charts(result, folder)
            out.print(f"charts: {', '.join(str(c) for c in charts)}", markup=False)
        out.print(f"results: {folder / 'result.json'}", markup=False)
    except OSError as exc:
        raise UserError(f"cannot write the results to {exc.filename or folder}: {exc.strerror}; "
                        f"the run is stored, write them elsewhere with: knoblab report {run_id} "
                        "--out DIR") from None
    if all(p["verdict"] == "failed" for p in result["points"]):
        raise UserError("every configuration failed; see the errors above")
    # Most measurements failed: the report stands on the few left, and the exit code says so.
    failed = sum(p["failed"] for p in result["points"])
    measured = sum(p["n"] for p in result["points"])
    if 2 * failed > failed + measured:
        raise UserError(f"{failed} of {failed + measured} measurements failed; the results "
                        f"above rest on the remaining {measured} — see the errors above")
    return 0


def cmd_runs(args: argparse.Namespace, store: Store, home: Path) -> int:
    from knoblab.runner import run_state

    table = Table("run", "name", "status", "server", "started")
    for run in store.list_runs():
        started = dt.datetime.fromtimestamp(run["created_at"]).strftime("%Y-%m-%d %H:%M")
        state = run_state({**run, "info": json.loads(run["info"] or "{}")})
        if state == "killed":
            state = "killed (knoblab resume)"
        table.add_row(run["id"], run["name"], state, run["server_version"] or "", started)
    _stdout().print(table)
    return 0


def cmd_knobs(args: argparse.Namespace, store: Store, home: Path) -> int:
    from knoblab.safety import safety_class
    from knoblab.server.binary import find_binary

    catalog = sandbox.catalog_for(find_binary(args.binary), home)
    knobs = catalog.matching(args.pattern)
    if not knobs:
        raise UserError(f"no setting of {catalog.server_version} matches {args.pattern!r}")
    table = Table("name", "type", "default", "allowed", "change", "scope", "class",
                  title=f"{len(knobs)} settings of {catalog.server_version}")
    for knob in knobs:
        table.add_row(knob.name, knob.type.lower(), knob.default or "", knob.describe_range(),
                      "dynamic" if knob.dynamic else "restart", knob.scope.lower(),
                      safety_class(knob.name))
    _stdout().print(table)
    return 0


def _stdout() -> Console:
    # Reports are read in terminals and in logs: never squeeze tables to 80 columns in a pipe.
    return Console(width=None if sys.stdout.isatty() else 160)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _force_exit(signum: int, frame: object) -> None:
    for server in list(sandbox._LIVE):
        if server.process is not None:
            server.process.kill()
    os._exit(130)


if __name__ == "__main__":
    sys.exit(main())
