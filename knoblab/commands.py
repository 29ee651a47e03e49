"""The commands that measure or change something (run, resume, tune, restore, capture,
verify), and report, which shows what they stored: each takes the parsed arguments, the store
and knoblab's home, and returns the exit code (knoblab.cli parses and dispatches)."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from knoblab import recommend, stopping
from knoblab.connection import Endpoint
from knoblab.consoles import (
    CaptureConsole,
    ConsoleListener,
    TuneConsole,
    VerifyConsole,
    console,
    say_written,
    stdout,
    write_json,
)
from knoblab.errors import UserError
from knoblab.literal import literal
from knoblab.store import Store
from knoblab.units import parse_duration, plural
from knoblab.vocabulary import Experiment, PointVerdict, RunStatus, StopReason

if TYPE_CHECKING:
    from knoblab.records import Results, TuneResult


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

    out = stdout()
    # The run the recommendation's gain comes from: its statement classes say what got faster.
    claimed = recommend.claim(result) if recommend.settings(result) else None
    measured = None if claimed is None else build_results(store, claimed.run_id)
    print_tune(result, out, measured)
    folder = args.out or report_folder(result.study)
    if args.json:  # first: when it cannot be written, no half-written folder is left
        write_json(args.json, exporters.search_json(result), f"the study is stored: {again}")
    try:
        exporters.claim_folder(folder)
        charts = write_tune_charts(result, folder)
        report = Report(tune_document(result, charts, spec_source, machine, measured),
                        search=result)
        say_written(out, exporters.write(report, folder), charts)
    except OSError as exc:
        raise UserError(f"cannot write the results to {exc.filename or folder}: {exc.strerror}; "
                        f"the study is stored: {again} with --out DIR") from None
    except UserError as exc:
        raise UserError(f"{exc}; the study is stored: {again} with --out DIR") from None
    out.check(f"the study is stored, its report is in {folder}")
    return 0


def cmd_resume(args: argparse.Namespace, store: Store, home: Path) -> int:
    from knoblab.runner import resume_run

    budget = None if args.budget is None else parse_duration(args.budget, "--budget")
    run = store.run(args.run_id)
    _not_a_capture(run, "is not resumed (capture or verify again)")
    stopped = (run["info"].get("stopped") or {}).get("reason")
    if run["status"] == RunStatus.DONE and (budget is None or stopped != StopReason.BUDGET):
        # Finished: resume_run says so (or refuses), measures nothing, and the report is not
        # printed again: where it is, in one line.
        resume_run(run["id"], store, home, ConsoleListener(), budget=budget)
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", run["name"]).strip(".-")[:60] or "run"
        folder = args.out or Path("knoblab-results") / f"{slug}-{run['id']}"  # as _show's
        out = stdout()
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
    return _show(store, run_id, args, ended=True)


def keep_answer(store: Store, results: Results) -> None:
    """A finished run's answer, as its report says it, kept for `knoblab runs`, which then
    lists it without judging the run again (see listings.answer)."""
    from knoblab.report.text import answer_text

    if results.status == RunStatus.DONE and results.finished_at is not None:
        store.update_info(results.run_id, answer={"said": answer_text(results),
                                                  "ended": results.finished_at})


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
    out = stdout()
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


def cmd_capture(args: argparse.Namespace, store: Store, home: Path) -> int:
    from knoblab.capturing import Request, capture
    from knoblab.server.dumping import parse_data

    request = Request(spec=args.spec, out=args.capture_out,
                      seconds=parse_duration(args.window, "--for"), data=parse_data(args.data),
                      log=args.capture_log, reconnect=args.reconnect == "idle")
    view = CaptureConsole()
    try:
        return capture(request, store, view, stopping.rearm)
    finally:
        view.close()


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

    out = stdout()
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
        write_json(json_file, json.dumps(result, indent=2), again)
    if folder is not None:
        from knoblab.report import exporters
        from knoblab.report.document import Report
        from knoblab.report.verification import verify_document, write_chart

        try:
            exporters.claim_folder(folder)
            charts = [write_chart(result, folder / "verify-windows.png")] \
                if result.get("windows") else []
            page = verify_document(result, charts, spec, command)
            say_written(out, exporters.write(Report(page), folder), charts)
        except OSError as exc:
            raise UserError(f"cannot write the report to {exc.filename or folder}: "
                            f"{exc.strerror}; {again} --out DIR") from None


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


def _show(store: Store, run_id: str, args: argparse.Namespace, ended: bool = False) -> int:
    """A run's report; `ended`: the run has just been measured, and its answer is kept."""
    from knoblab.report import exporters, print_report, write_charts
    from knoblab.report.document import Report, build_document
    from knoblab.results import build_results

    results = build_results(store, run_id)
    if ended:
        keep_answer(store, results)
    out = stdout()
    print_report(results, out)
    for warning in results.warnings:
        out.print(f"warning: {warning}", style="yellow", markup=False)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", results.name).strip(".-")[:60] or "run"
    folder = args.out or Path("knoblab-results") / f"{slug}-{run_id}"
    if args.json:  # first: when it cannot be written, no half-written folder is left
        write_json(args.json, exporters.results_json(results),
                    f"the run is stored: knoblab report {run_id}")
    try:
        exporters.claim_folder(folder)
        charts = write_charts(results, folder) if any(p.n for p in results.points) else []
        report = Report(build_document(results, charts), results=results,
                        trials=store.trials(run_id))
        say_written(out, exporters.write(report, folder), charts)
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
