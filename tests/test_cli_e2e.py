"""End-to-end tests of the real `knoblab` command, run as a subprocess against real servers."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from knoblab.server.binary import ServerBinary
from tests.fakes import cli_command, cli_env, knoblab_here, reaped, servers_under, store_args

pytestmark = pytest.mark.server

REPO = Path(__file__).resolve().parent.parent
VERDICTS = {"best", "fastest measured", "equivalent", "inconclusive", "worse", "failed"}

SWEEP_SPEC = """\
name = "tiny-sweep"

[dataset]
rows = 50_000

[workload]
sql = "SELECT COUNT(*) FROM dt2 WHERE slack LIKE 'a%'"
cache = "warm"
repetitions = 2

[sweep]
read_buffer_size = ["8200", "128K", "2M"]

[statistics]
seed = 7
"""

INTERRUPT_REPETITIONS = 8
INTERRUPT_SPEC = SWEEP_SPEC.replace('name = "tiny-sweep"', 'name = "ctrl-c"').replace(
    "repetitions = 2", f"repetitions = {INTERRUPT_REPETITIONS}").replace(
    'read_buffer_size = ["8200", "128K", "2M"]', 'read_buffer_size = ["8200", "2M"]')


def knoblab(home: Path, store: Path, *args: str, cwd: Path,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cli_command(store, *args), env=cli_env(home), cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, check=False)


def knoblab_in_here(home: Path, store: Path, *args: str, cwd: Path
                    ) -> subprocess.CompletedProcess[str]:
    """`knoblab` as above, run in this process (fakes.knoblab_here): what it says and does."""
    return knoblab_here(store_args(store, *args), cli_env(home), cwd)


def _flat(text: str) -> str:
    """Text with every run of whitespace as one space (rich wraps long lines)."""
    return " ".join(text.split())


def _db(store: Path, sql: str, *params: object) -> list[tuple]:
    with sqlite3.connect(store) as conn:
        return conn.execute(sql, params).fetchall()


# --------------------------------------------------------------------------- a complete sweep


@pytest.fixture(scope="module")
def sweep(knoblab_home: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    work = tmp_path_factory.mktemp("cli-sweep")
    spec = work / "tiny.toml"
    spec.write_text(SWEEP_SPEC)
    store = work / "s.sqlite"
    proc = knoblab(knoblab_home, store, "run", str(spec), "--json", str(work / "result.json"),
                   "--out", str(work / "out"), cwd=work)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((work / "result.json").read_text())
    return {"proc": proc, "result": result, "work": work, "store": store}


def test_sweep_prints_the_table_and_a_conclusion(sweep):
    stdout, result = sweep["proc"].stdout, sweep["result"]
    for value in ("8200", "128K", "2M"):
        assert value in stdout
    assert "8K*" in stdout  # 8200 was rounded to 8192 by the server, and the table says so
    assert "rounded" in stdout  # the footnote explaining the *
    assert "best" in stdout
    lines = stdout.splitlines()
    row_8200 = next(line for line in lines if line.strip().startswith("8200"))
    assert "8K*" in row_8200
    # the leader reads "fastest measured" when the change to it is not shown to help
    assert any(word in row_8200 for word in VERDICTS | {"fastest measured"})
    text = result["conclusion"]["text"]
    assert text.strip()
    assert _flat(text) in _flat(stdout)
    # a sentence, not an empty placeholder
    assert text.split()[0] in ("Best:", "Fastest", "No", "These")
    assert "tiny-sweep" in stdout and "MyISAM" in stdout


def test_sweep_results_json_has_the_designed_shape(sweep, binary: ServerBinary):
    result = sweep["result"]
    assert len(result["run_id"]) >= 6
    assert result["kind"] == "sweep"
    assert result["status"] == "done"
    assert result["objective"] == {"metric": "seconds", "direction": "minimize"}
    assert result["server"]["binary"] == str(binary.path)
    assert result["server"]["version"] == binary.short_version
    points = result["points"]
    assert [p["settings"] for p in points] == [
        {"read_buffer_size": "8200"}, {"read_buffer_size": "128K"}, {"read_buffer_size": "2M"}]
    assert [p["effective"] for p in points] == [
        {"read_buffer_size": "8192"}, {"read_buffer_size": "131072"},
        {"read_buffer_size": "2097152"}]
    for point in points:
        assert point["n"] == 2
        assert point["failed"] == 0
        assert len(point["samples"]) == 2 and all(s > 0 for s in point["samples"])
        low, high = point["ci95"]
        assert isinstance(low, float) and isinstance(high, float)
        assert low <= point["median"] <= high
        assert point["verdict"] in VERDICTS - {"failed"}
    assert [p["is_default"] for p in points] == [False, True, False]
    # The leader: crowned only when another point is shown worse than it; "best" only when
    # the run recommends it, else the fastest measured.
    leader = [p for p in points if p["p_value"] is None]
    assert len(leader) == 1
    assert leader[0]["median"] == min(p["median"] for p in points)
    conclusion = result["conclusion"]
    assert isinstance(conclusion["significant"], bool)
    if conclusion["significant"]:
        assert leader[0]["verdict"] in ("best", "fastest measured")
        recommended = conclusion["recommended"] == leader[0]["settings"]
        assert (leader[0]["verdict"] == "best") == recommended
        assert conclusion["best"] == (leader[0]["settings"] if recommended else None)
    else:
        assert leader[0]["verdict"] in ("equivalent", "inconclusive")
        assert conclusion["best"] is None
    assert all(p["verdict"] not in ("best", "fastest measured") for p in points
               if p is not leader[0])
    assert isinstance(conclusion["text"], str) and conclusion["text"]
    # The same document is kept in the output folder.
    assert json.loads((sweep["work"] / "out" / "result.json").read_text()) == result


def test_sweep_stored_every_trial(sweep):
    run_id = sweep["result"]["run_id"]
    rows = _db(sweep["store"], "SELECT point_idx, repetition, status, value FROM trials "
               "WHERE run_id = ?", run_id)
    assert sorted((p, r) for p, r, _, _ in rows) == [(p, r) for p in range(3) for r in range(2)]
    assert all(status == "done" and value > 0 for _, _, status, value in rows)
    assert _db(sweep["store"], "SELECT status FROM runs WHERE id = ?", run_id) == [("done",)]


def test_sweep_writes_a_chart(sweep):
    chart = sweep["work"] / "out" / "chart.png"
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert chart.stat().st_size > 5_000
    assert "chart.png" in sweep["proc"].stdout


def test_report_gives_the_same_points(sweep, knoblab_home):
    work, result = sweep["work"], sweep["result"]
    again = work / "again.json"
    proc = knoblab(knoblab_home, sweep["store"], "report", result["run_id"], "--json",
                   str(again), "--out", str(work / "out2"), cwd=work)
    assert proc.returncode == 0, proc.stderr
    reported = json.loads(again.read_text())
    assert reported["run_id"] == result["run_id"]
    assert reported["points"] == result["points"]
    assert reported["conclusion"] == result["conclusion"]
    assert (work / "out2" / "chart.png").exists()
    # A unique prefix of the run id is enough.
    short = knoblab(knoblab_home, sweep["store"], "report", result["run_id"][:5], "--out",
                    str(work / "out3"), cwd=work)
    assert short.returncode == 0, short.stderr
    assert _flat(result["conclusion"]["text"]) in _flat(short.stdout)


def test_runs_lists_the_run(sweep, knoblab_home):
    proc = knoblab(knoblab_home, sweep["store"], "runs", cwd=sweep["work"])
    assert proc.returncode == 0, proc.stderr
    line = next((line for line in proc.stdout.splitlines() if sweep["result"]["run_id"] in line),
                None)
    assert line is not None, proc.stdout
    assert "tiny-sweep" in line and "done" in line


def test_a_runs_answer_is_kept_as_it_ended_and_listed_without_judging_again(
        sweep, knoblab_home, tmp_path):
    """`knoblab runs` reads the answer the run said when it ended; a run that ended again
    since (or before answers were kept) is judged again, as its report is."""
    from knoblab.report.text import answer_text
    from knoblab.results import build_results
    from knoblab.store import Store

    run_id = sweep["result"]["run_id"]
    (info, ended), = _db(sweep["store"], "SELECT info, finished_at FROM runs WHERE id = ?", run_id)
    kept = json.loads(info)["answer"]
    assert kept == {"said": answer_text(build_results(Store(f"sqlite:///{sweep['store']}"),
                                                      run_id)), "ended": ended}
    assert kept["said"].startswith(("best: ", "keep the current value", "no difference",
                                    "undecided")), kept
    store = tmp_path / "s.sqlite"
    shutil.copyfile(sweep["store"], store)

    def listed(answer: dict) -> str:
        _db(store, "UPDATE runs SET info = json_set(info, '$.answer', json(?)) WHERE id = ?",
            json.dumps(answer), run_id)
        done = knoblab_in_here(knoblab_home, store, "runs", "--limit", "1", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return _flat(done.stdout)

    assert "as kept" in listed({"said": "as kept", "ended": ended})
    judged = listed({"said": "as kept", "ended": ended - 60})
    assert "as kept" not in judged and _flat(kept["said"])[:20] in judged, judged


def test_knobs_lists_read_buffer_size_with_its_range(knoblab_home, catalog, tmp_path):
    proc = knoblab(knoblab_home, tmp_path / "s.sqlite", "knobs", "buffer_size", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    knob = catalog.knobs["read_buffer_size"]
    expected_range = knob.describe_range()
    assert expected_range.startswith("8K to ")
    line = next((line for line in proc.stdout.splitlines() if "read_buffer_size" in line), None)
    assert line is not None, f"read_buffer_size is not listed in full:\n{proc.stdout}"
    assert expected_range in line
    assert "dynamic" in line and "session" in line and knob.default in line
    # Only settings matching the pattern are listed.
    assert "max_connections" not in proc.stdout


# --------------------------------------------------------------------------- Ctrl-C and resume


def _wait_done_trials(store: Path, count: int, proc: subprocess.Popen, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"knoblab exited early with {proc.returncode}"
        try:
            done = _db(store, "SELECT COUNT(*) FROM trials WHERE status = 'done'")[0][0]
        except sqlite3.OperationalError:  # not created yet, or locked for a moment
            done = 0
        if done >= count:
            return done
        time.sleep(0.1)
    raise AssertionError(f"fewer than {count} trials done after {timeout} s")


def test_ctrl_c_then_resume(knoblab_home, tmp_path):
    spec = tmp_path / "ctrl-c.toml"
    spec.write_text(INTERRUPT_SPEC)
    store = tmp_path / "s.sqlite"
    stderr_file = tmp_path / "run.stderr"
    with open(stderr_file, "w") as stderr:
        # Its own process group, signalled as a terminal's Ctrl-C signals the foreground group.
        proc = subprocess.Popen(cli_command(store, "run", str(spec), "--out", str(tmp_path / "o")),
                                env=cli_env(knoblab_home), cwd=tmp_path, stdout=subprocess.DEVNULL,
                                stderr=stderr, start_new_session=True)
        with reaped(proc):
            _wait_done_trials(store, 2, proc, timeout=180)
            os.killpg(proc.pid, signal.SIGINT)
            code = proc.wait(timeout=20)
    message = stderr_file.read_text()
    assert code == 130, message
    assert "interrupted" in message
    assert "Traceback" not in message
    assert servers_under(knoblab_home) == []

    (run_id, status), = _db(store, "SELECT id, status FROM runs")
    assert status == "interrupted"
    before = _db(store, "SELECT id, point_idx, repetition, value FROM trials "
                 "WHERE status = 'done' ORDER BY id")
    total = 2 * INTERRUPT_REPETITIONS
    assert 2 <= len(before) < total, "the run finished before it could be interrupted"

    resumed = knoblab(knoblab_home, store, "resume", run_id, "--json", str(tmp_path / "r.json"),
                      "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert servers_under(knoblab_home) == []
    assert _db(store, "SELECT status FROM runs WHERE id = ?", run_id) == [("done",)]

    after = _db(store, "SELECT id, point_idx, repetition, value FROM trials "
                "WHERE status = 'done' ORDER BY id")
    cells = [(p, r) for _, p, r, _ in after]
    assert sorted(cells) == [(p, r) for p in range(2) for r in range(INTERRUPT_REPETITIONS)]
    # What was measured before the interrupt was kept as it was, not measured again.
    assert after[:len(before)] == before
    assert len(after) == total
    # Resume ran only the missing trials: nothing new for the cells already done.
    done_before = {(p, r) for _, p, r, _ in before}
    assert not [row for row in after[len(before):] if (row[1], row[2]) in done_before]

    result = json.loads((tmp_path / "r.json").read_text())
    assert result["run_id"] == run_id and result["status"] == "done"
    assert [p["n"] for p in result["points"]] == [INTERRUPT_REPETITIONS] * 2
    assert sum(1 for p in result["points"] if p["p_value"] is None) == 1  # one leader
