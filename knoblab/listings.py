"""The commands that list and compare what the store holds (compare, runs) and the settings a
server has (knobs): each takes the parsed arguments, the store and knoblab's home, and returns
the exit code."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Column, Table
from rich.text import Text

from knoblab import places, terminal
from knoblab.consoles import say_written, stdout
from knoblab.errors import UserError
from knoblab.literal import literal
from knoblab.owners import alive, left_behind, run_state
from knoblab.store import Store
from knoblab.units import format_duration, plural
from knoblab.vocabulary import ComparisonVerdict, Experiment, Finding, PointVerdict, RunStatus

if TYPE_CHECKING:
    from knoblab.compare import Comparison


def cmd_compare(args: argparse.Namespace, store: Store, home: Path) -> int:
    from knoblab.compare import change_header, compare_runs
    from knoblab.report.format import ratio_change_text
    from knoblab.units import num
    from knoblab.words import WHY_NOT_BOUNDED, bounded

    comparisons = compare_runs(store, args.run_ids)
    out = stdout()
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
        from knoblab.report.exporters import comparison_json

        places.write_file(args.json, comparison_json(comparisons), "--json")
    from knoblab.report.tables import print_movement, runs_movement

    runs = [comparisons[0].first, *(c.other for c in comparisons)]
    print_movement(runs_movement(runs), out)
    if args.out:
        from knoblab.report import exporters
        from knoblab.report.document import Report, compare_document

        try:
            exporters.claim_folder(args.out)
            page = compare_document(comparisons, [_agreement(c) for c in comparisons])
            say_written(out, exporters.write(Report(page), args.out), [])
        except OSError as exc:
            raise UserError(f"cannot write the comparison to {exc.filename or args.out}: "
                            f"{exc.strerror}; give a writable folder with --out") from None
    out.check(f"the comparison is in {args.json}" if args.json else "")
    return 0


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


def cmd_runs(args: argparse.Namespace, store: Store, home: Path) -> int:
    from knoblab.studies import PREFIX

    if args.limit < 0:
        raise UserError(f"--limit {args.limit}: give a number of runs, or 0 for all")
    _clear_left_behind(home)
    out = stdout()
    # A name and an answer are wrapped whole, never cut: they are what a row is read for.
    table = Table("run", Column("name", no_wrap=True, overflow="fold"), "kind", "status",
                  "server", "machine", "started", "took",
                  Column("result", overflow="fold", max_width=40))
    # A tuning study is one row; its runs (trials, validations, reductions: some 4 a trial)
    # are listed only with --study.
    rows = (_study_rows(args, store) if args.study is None else []) + _run_rows(args, store)
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


def _clear_left_behind(home: Path) -> None:
    """What a knoblab killed with -9 left, cleared as a run's start clears it, since the
    listing shows that run as killed: its control groups (its servers died with it) and its
    sandboxes' folders (each a copy of the data); a listing never fails for what it could not
    remove."""
    from knoblab.server.cgroups import reap_left_behind

    removed = reap_left_behind(alive)
    if removed:
        terminal.stderr().print(f"removed {removed} control group{'s' if removed > 1 else ''} "
                                "left by a killed knoblab")
    with contextlib.suppress(OSError):
        if reclaimed := _reap_sandboxes(home):
            terminal.stderr().print(literal(reclaimed))


Row = tuple[float, list[str]]  # when it began, and its cells


def _study_rows(args: argparse.Namespace, store: Store) -> list[Row]:
    """A row per tuning study the filters keep, newest first, --limit of them at most."""
    from knoblab.studies import describe

    rows: list[Row] = []
    for study in store.studies(name=args.name):
        state = run_state(study)  # a study is owned as a run is
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
    return rows


def _run_rows(args: argparse.Namespace, store: Store) -> list[Row]:
    """A row per run the filters keep (a study's own with --study), newest first, --limit of
    them at most. A run's state is read from its owner process, so it is filtered here, not
    in SQL."""
    from knoblab.store import study_of

    rows: list[Row] = []
    for run in store.each_run(args.name):
        info = json.loads(run["info"] or "{}")
        if study_of(info) != args.study:
            continue
        state = run_state({**run, "info": info})
        if args.status and state != args.status:
            continue
        end = run["finished_at"] or (time.time() if state == RunStatus.RUNNING else None)
        took = "—" if end is None else format_duration(end - run["created_at"])
        has_points = Experiment(run["kind"]).has_points
        kind = f"{run['kind']} · {(info.get('workload') or {}).get('kind', 'query')}" \
            if has_points else run["kind"]
        rows.append((run["created_at"], [
            run["id"], literal(run["name"]), kind,  # one line each
            state if state != RunStatus.KILLED else "killed (knoblab resume)" if has_points
            else "killed (knoblab restore)",
            literal(run["server_version"] or ""), _machine_text(run["host"], info),
            _when(run["created_at"]), took,
            literal(answer(store, {**run, "info": info})) if state == RunStatus.DONE and has_points
            else literal((info.get("verify") or {}).get("said") or "")]))
        if args.limit and len(rows) == args.limit:
            break
    return rows


def _reap_sandboxes(home: Path) -> str:
    """The folders of sandboxes whose knoblab is gone (a kill -9 leaves its copy of the data
    behind) and the templates it was building, removed as a run's start removes them, never
    a live run's; what that freed, in words ("" when nothing was left)."""
    found = {folder: _bytes_under(folder) + (_bytes_under(data_root) if (
                 data_root := Path(owner.get("data_root") or "")).name ==
                 f"knoblab-{folder.name}" else 0)
             for folder, owner in left_behind(home)}
    if not found:
        return ""
    from knoblab.server.sandbox import reap_orphans  # here: only with something to reap

    stopped = reap_orphans(home)
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


def answer(store: Store, run: dict[str, Any]) -> str:
    """A finished run's answer for its row: its best value, or that the values do not
    differ (knoblab.report.text.answer_text). As the run said it when it ended
    (commands.keep_answer), or judged from the store as its report is: for a run that ended
    before answers were kept, or that ended again since without keeping one."""
    kept = run["info"].get("answer") if isinstance(run["info"], dict) else None
    if isinstance(kept, dict) and kept.get("ended") == run["finished_at"] and \
            isinstance(kept.get("said"), str):
        return kept["said"]
    from knoblab.report.text import answer_text
    from knoblab.results import build_results

    try:
        return answer_text(build_results(store, run["id"]))
    except Exception:  # noqa: BLE001 - one run's unreadable rows must not hide the others
        return "—"


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
    from knoblab.server.sandbox import catalog_for

    catalog = catalog_for(find_binary(args.binary), home)
    knobs = catalog.matching(args.pattern)
    if not knobs:
        raise UserError(f"no setting of {catalog.server_version} matches {args.pattern!r}")
    table = Table("name", "type", "default", "allowed", "change", "scope", "class",
                  title=f"{plural(len(knobs), 'setting')} of {catalog.server_version}")
    for knob in knobs:
        table.add_row(knob.name, knob.type.lower(), knob.default or "", knob.describe_range(),
                      "dynamic" if knob.dynamic else "restart", knob.scope.lower(),
                      safety_class(knob.name))
    out = stdout()
    out.print(table)
    out.check()
    return 0
