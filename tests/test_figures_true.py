"""Figures and listings mean what they say: the regime follows its stated rule, a replay's
sessions are the capture's and its class times are called session-seconds, how far a replay
at the original speed fell behind is shown, sysbench's errors are explained, and runs, resume
and compare say what a run's state is."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from knoblab import cli
from knoblab.capture.plan import plan_for
from knoblab.store import Store
from knoblab.workloads.timed import REGIME_RULE, regime
from tests import fakes
from tests.test_replay import _case, _knoblab

BOX = re.compile("[\u2500-\u257f]")
GOLDEN = Path(__file__).parent / "data" / "golden"


def _flat(text: str) -> str:
    """Printed text with the tables' lines taken out and every line break read as a space."""
    return " ".join(BOX.sub(" ", text).split())


# --- the regime ------------------------------------------------------------------------------


def test_a_run_that_waited_on_the_disk_is_io_bound_even_with_a_busy_core():
    # The run the report called CPU-bound: a core kept busy, but 29% iowait and 84.8 MB read.
    assert regime(0.9, 0.29, 84.8e6) == "I/O-bound"
    assert regime(0.9, 0.02, 84.8e6) == "CPU-bound"  # reads that never made it wait
    assert "10% or more" in REGIME_RULE and "iowait" in REGIME_RULE


def _golden_report(tmp_path: Path, name: str, capsys) -> tuple[str, str]:
    """A golden run's report, from a copy of the golden store: (terminal, report.md)."""
    store = tmp_path / "store.sqlite"
    shutil.copy(GOLDEN / "store.sqlite", store)
    run_id = next(r["id"] for r in Store(f"sqlite:///{store}").list_runs(limit=100)
                  if r["name"] == name)
    out = tmp_path / name
    assert cli.main(["--store", f"sqlite:///{store}", "report", run_id, "--out", str(out)]) == 0
    return _flat(capsys.readouterr().out), _flat((out / "report.md").read_text())


def test_the_regime_column_says_its_rule_in_the_terminal_and_the_report(tmp_path, capsys):
    printed, written = _golden_report(tmp_path, "golden-query-sweep", capsys)
    rule = ("Regime: I/O-bound when the machine's CPUs waited on the disk for 10% or more of "
            "their time during the run (iowait)")
    assert "CPU-bound" in printed and rule in printed and rule in written


def test_sysbench_errors_are_said_where_their_column_is(tmp_path, capsys):
    printed, written = _golden_report(tmp_path, "golden-sysbench", capsys)
    said = ("Errors: transactions sysbench rolled back and ran again after an error it ignores "
            "(1213 deadlock, 1205 lock wait timeout, 1020 record changed)")
    assert " errors " in printed and said in printed and said in written


# --- a replay's sessions, its class times, its lag --------------------------------------------


def _slow_log(sessions: dict[int, list[str]]) -> str:
    """A MariaDB slow log, every statement at the same second, of these connections open at
    once (their statements in turn)."""
    out = ["/usr/sbin/mariadbd, Version: 10.11.19-MariaDB-log (Debian 12). started with:",
           "Tcp port: 0  Unix socket: /tmp/x/mysqld.sock", "Time\t\t    Id Command\tArgument",
           "# Time: 261125  5:00:00"]
    turns = range(max(map(len, sessions.values())))
    for thread, statement in ((t, s[n]) for n in turns for t, s in sessions.items() if n < len(s)):
        out += ["# User@Host: app[app] @ localhost []",
                f"# Thread_id: {thread}  Schema: shop  QC_hit: No",
                "# Query_time: 0.000100  Lock_time: 0.000000  Rows_sent: 1  "
                "Rows_examined: 1", "# Rows_affected: 0  Bytes_sent: 60",
                "SET timestamp=1795582800;", f"{statement};"]
    return "\n".join(out) + "\n"


def test_connections_that_only_set_themselves_up_are_not_the_captures_sessions(tmp_path):
    # What a capture script's own connections leave in the slow log: a connector's probe that
    # only set its character set, and the client's sessions, each beginning the same way.
    log = tmp_path / "slow.log"
    log.write_text(_slow_log({
        3: ["SET NAMES utf8mb4"],
        5: ["SET NAMES utf8mb4", "SELECT a FROM t WHERE id = 1", "SELECT a FROM t WHERE id = 2"],
        6: ["SET NAMES utf8mb4", "SET autocommit=1", "SELECT a FROM t WHERE id = 3"],
    }))
    plan = plan_for(log, tmp_path / "home")
    assert plan.sessions == 2 and plan.peak == 2
    assert plan.statements == 6  # the sessions' set-up is replayed with them
    assert plan.skipped == {"connections that only set up their session (SET NAMES …)": 1}
    first = [text for kind, _, text in plan.records(plan.session(0)) if kind >= 0]
    assert first[0] == b"SET NAMES utf8mb4"


@pytest.mark.server
def test_a_replay_counts_the_captures_sessions_and_says_how_far_behind_it_fell(
        knoblab_home: Path, tmp_path: Path):
    # Two sessions and a connector's probe. Every statement is due at the same second: the
    # statements after a SLEEP(1.5) start at least 1.5 s behind the capture's schedule.
    spec = _case(tmp_path, [])
    (tmp_path / "slow.log").write_text(_slow_log({
        2: ["SET NAMES utf8mb4"],
        3: ["SELECT SLEEP(1.5)", *(f"SELECT a FROM t WHERE id = {i}" for i in range(1, 8))],
        4: [f"SELECT a / 7 FROM t WHERE id = {i}" for i in range(1, 4)],
    }))
    spec.write_text(spec.read_text().replace('log = "slow.log"',
                                             'log = "slow.log"\nspeed = "original"'))
    out = _knoblab(knoblab_home, tmp_path, spec)
    assert out.returncode == 0, out.stderr
    printed = _flat(out.stdout)
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["workload"]["plan"]["sessions"] == 2
    assert "11 statements, 3 classes, 2 sessions (2 at once)" in result["workload"]["title"]
    # The classes' times are added up over the sessions, and called so.
    assert "share session-s at 4 p95 ms at 4" in printed and "share s at" not in printed
    assert ("session-s: a class's statements' times added up over every session of a run "
            "(2 replayed at once), so the classes together can take up to 2× the run's wall "
            "time") in printed
    # How late the statements started, per point, and that the replay did not keep the pace.
    behind = [p["behind"] for p in result["points"]]
    assert all(b["p95"] >= 1.5 and b["median"] <= b["p95"] for b in behind)
    assert "Behind the capture's schedule (speed = \"original\"), how late the statements " \
        "started, median per run: 4: " in printed
    assert "The replay fell behind the capture's schedule by more than 1 s at 4, 9: it did " \
        "not replay at the original speed there" in printed
    report = _flat((tmp_path / "out" / "report.md").read_text())
    assert "The replay fell behind the capture's schedule by more than 1 s at 4, 9" in report


# --- runs, resume, compare --------------------------------------------------------------------


@pytest.fixture
def fake_store(fake_servers: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """The URL of a store of runs measured on the fake server, from the test's folder."""
    monkeypatch.chdir(tmp_path)
    return f"sqlite:///{tmp_path / 'store.sqlite'}"


def _sweep(tmp_path: Path, values: str = '"2M", "32M"') -> Path:
    """A sweep of the fake server's sort_buffer_size: 1.0 s below 16M, 0.8 s from it (2M is
    its default)."""
    spec = tmp_path / "sweep.toml"
    spec.write_text('name = "plain sweep"\n[workload]\nkind = "fake"\nrepetitions = 3\n'
                    f'[statistics]\nseed = 3\n[sweep]\nsort_buffer_size = [{values}]\n')
    return spec


def _listed(capsys, *args: str) -> tuple[int, str]:
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, _flat(captured.out + captured.err)


def _run_ids(url: str) -> list[str]:
    return [r["id"] for r in Store(url).list_runs(limit=None)]


def test_runs_shows_a_finished_runs_answer_as_its_conclusion_recommends(
        fake_store: str, tmp_path: Path, capsys):
    assert cli.main(["--store", fake_store, "run", str(_sweep(tmp_path))]) == 0
    capsys.readouterr()
    code, listed = _listed(capsys, "--store", fake_store, "runs")
    assert code == 0 and "plain sweep" in listed and "best: 32M (0.8" in listed
    # Without the current value (the default) measured, no change is shown to help: the
    # answer is to keep it, as the conclusion says, not the fastest value.
    assert cli.main(["--store", fake_store, "run", str(_sweep(tmp_path, '"1M", "32M"'))]) == 0
    printed = _flat(capsys.readouterr().out)
    assert "keep" in printed
    code, listed = _listed(capsys, "--store", fake_store, "runs")
    assert code == 0 and "keep the current value (32M not shown to help)" in listed


def test_resume_of_a_finished_run_says_so_and_where_its_report_is(fake_store: str,
                                                                  tmp_path: Path, capsys):
    assert cli.main(["--store", fake_store, "run", str(_sweep(tmp_path))]) == 0
    capsys.readouterr()
    (run_id,) = _run_ids(fake_store)
    measured = len(fakes.SCRIPT.measured)
    code = cli.main(["--store", fake_store, "resume", run_id])
    said = capsys.readouterr()
    assert code == 0
    assert said.err == f"run {run_id} is already complete\n"
    assert said.out == (f"its report is in knoblab-results/plain-sweep-{run_id} (again: "
                        f"knoblab report {run_id})\n")
    assert len(fakes.SCRIPT.measured) == measured  # nothing measured again


def test_compare_says_which_run_is_incomplete_and_what_it_lacks(fake_store: str,
                                                                 tmp_path: Path, capsys):
    spec = _sweep(tmp_path)
    assert cli.main(["--store", fake_store, "run", str(spec)]) == 0
    (finished,) = _run_ids(fake_store)
    fakes.SCRIPT.interrupt_at = len(fakes.SCRIPT.measured) + 3  # the 3rd of 6: 2 stored
    assert cli.main(["--store", fake_store, "run", str(spec)]) == 130
    (stopped,) = set(_run_ids(fake_store)) - {finished}
    capsys.readouterr()
    code, said = _listed(capsys, "--store", fake_store, "compare", finished, stopped)
    assert code == 0
    assert (f"warning: run {stopped} is incomplete (interrupted): 4 of its 6 measurements are "
            "missing; its figures and its best are not final (finish it: knoblab resume "
            f"{stopped})") in said
    assert f"run {finished} is incomplete" not in said
    # One that measured nothing is refused: its comparison would be of nothing.
    fakes.SCRIPT.interrupt_at = len(fakes.SCRIPT.measured) + 1
    assert cli.main(["--store", fake_store, "run", str(spec)]) == 130
    (empty,) = set(_run_ids(fake_store)) - {finished, stopped}
    capsys.readouterr()
    code, said = _listed(capsys, "--store", fake_store, "compare", finished, empty)
    assert code == 2
    assert f"run {empty} is interrupted and measured nothing yet: finish it first" in said


def test_rows_measured_once_are_never_said_to_differ():
    # A replay of sessions that write returns rows that depend on how they interleaved: one
    # measurement a side cannot show that a setting changed the rows, two alike can.
    from types import SimpleNamespace

    from knoblab.classes import compare_classes

    def measurement(seconds: float, checksum: str) -> SimpleNamespace:
        return SimpleNamespace(details={"classes": {"a": {
            "n": 10, "seconds": seconds, "p95": 0.01, "errors": {}, "checksum": checksum}}})

    once = compare_classes({0: [measurement(1.0, "x")], 1: [measurement(1.1, "y")]}, 0,
                           {"a": "select ?"})
    assert once is not None and not once.rows[0].changes[0].rows_differ
    twice = compare_classes({0: [measurement(1.0, "x"), measurement(1.02, "x")],
                             1: [measurement(1.1, "y"), measurement(1.12, "y")]}, 0,
                            {"a": "select ?"})
    assert twice is not None and twice.rows[0].changes[0].rows_differ
