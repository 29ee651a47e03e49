"""Rows of knoblab's own store that are not what knoblab wrote (a damaged or hand-edited store),
and stores knoblab must not use at all: each is one line naming the store and what is wrong
(exit 2) — or, for `knoblab runs`, the damaged run shown as damaged among the others — never a
traceback and never "unexpected error"."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from knoblab import cli
from knoblab.errors import UserError
from knoblab.store import Store

GOLDEN = Path(__file__).parent / "data" / "golden" / "store.sqlite"
QUERY_RUN = "b96b0a30"  # golden-query-sweep: times, judged on their logarithms
OTHER_RUN = "d8d98b00"  # golden-grid


def _copy(tmp_path: Path, sql: str = "", *params: object) -> Path:
    path = tmp_path / "store.sqlite"
    shutil.copyfile(GOLDEN, path)
    if sql:
        with sqlite3.connect(path) as conn:
            conn.execute(sql, params)
        conn.close()
    return path


def _knoblab(path: Path, args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
             capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    monkeypatch.setenv("KNOBLAB_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KNOBLAB_STORE", raising=False)
    capsys.readouterr()
    code = cli.main(["--store", f"sqlite:///{path}", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "unexpected" not in err, err
    return lines[0]


@pytest.mark.parametrize("sql, said", [
    ("UPDATE trials SET value = 'abc'", "measured value is 'abc'"),
    ("UPDATE trials SET value = 1e999", "not a finite number"),
    ("UPDATE trials SET value = -1", "negative"),
    ("UPDATE trials SET value = 0", "measured value of 0"),
    ("UPDATE trials SET details = '[1]'", "details"),
    ("UPDATE trials SET started_at = 'x'", "start time"),
    ("UPDATE points SET config = '[1,2]'", "configuration"),
    ("UPDATE points SET requested = '{\"a\": 5}'", "settings"),
    ("UPDATE runs SET info = 'garbage'", "description"),
    ("UPDATE runs SET info = 'null'", "description"),
    ("UPDATE runs SET info = '{\"knobs\": 5}'", "knobs"),
    ("UPDATE runs SET info = '{\"statistics\": {\"seed\": \"x\"}}'", "seed"),
    ("UPDATE runs SET name = X'ff00'", "raw bytes"),
    ("UPDATE runs SET created_at = 'x'", "start time"),
    ("UPDATE runs SET info = json_set(info, '$.workload.kind', 'nope')", "does not know"),
    ("UPDATE runs SET info = json_set(info, '$.statistics.confidence', 5)", "out of range"),
    ("UPDATE runs SET info = json_set(info, '$.statistics.test', 'nope')", "does not know"),
    ("UPDATE runs SET info = json_set(info, '$.steps', json('[{\"a\": 1}]'))", "not a step"),
])
def test_a_damaged_row_of_a_run_is_one_line_naming_store_run_and_what(
        sql: str, said: str, tmp_path, monkeypatch, capsys):
    path = _copy(tmp_path, f"{sql} WHERE {'id' if 'runs' in sql else 'run_id'} = ?",
                 QUERY_RUN)
    for args in (["report", QUERY_RUN, "--out", str(tmp_path / "out")],
                 ["compare", QUERY_RUN, OTHER_RUN]):
        code, _, err = _knoblab(path, args, tmp_path, monkeypatch, capsys)
        line = _one_line(err)
        assert code == 2, err
        assert str(path) in line and "damaged" in line and QUERY_RUN in line and said in line


@pytest.mark.parametrize("sql", [
    "UPDATE runs SET info = 'garbage'", "UPDATE runs SET info = 'null'",
    "UPDATE runs SET name = X'ff00'", "UPDATE runs SET created_at = 'x'",
    "UPDATE runs SET info = '{\"workload\": 3}'", "UPDATE runs SET status = 7",
])
def test_runs_lists_a_damaged_run_as_damaged_and_the_others_as_ever(
        sql: str, tmp_path, monkeypatch, capsys):
    path = _copy(tmp_path, f"{sql} WHERE id = ?", QUERY_RUN)
    code, out, err = _knoblab(path, ["runs", "--limit", "0"], tmp_path, monkeypatch, capsys)
    assert code == 0 and "Traceback" not in err and "unexpected" not in err, err
    flat = " ".join(out.split())
    assert "damaged" in flat and QUERY_RUN in flat
    assert all(name in flat for name in ("golden-grid", "golden-sysbench", "golden-external"))


# Every column of the rows reports are built from, and values of every wrong kind.
COLUMNS = {
    "runs": ["id", "name", "kind", "status", "created_at", "finished_at", "host",
             "spec_source", "server_binary", "server_version", "info", "error"],
    "points": ["idx", "requested", "config"],
    "trials": ["point_idx", "repetition", "position", "status", "started_at", "finished_at",
               "value", "effective", "details", "error"],
    "seconds": ["t", "threads", "tps", "qps", "latency_ms"],
    "os_seconds": ["t", "cpu_user", "cpu_iowait", "disk_read_bytes"],
}
BAD = st.one_of(
    st.sampled_from([None, "", "garbage", "null", "[]", "[1,2]", "{}", '{"a": [1]}', "1e999",
                     -1, 0, 1e308, float("inf"), float("-inf"), float("nan"), 2**62, -(2**62),
                     b"\xff\x00", "done", '{"knobs": "x"}', '{"statistics": []}',
                     '{"owner": {"pid": "x"}}', '{"workload": {"kind": 5}}',
                     '{"steps": [1]}', '{"unavailable": {"x": 1}}']),
    st.text(max_size=12), st.integers(-2**63, 2**63 - 1),  # what SQLite can hold
    st.floats(), st.binary(max_size=6),
)


@settings(max_examples=12, deadline=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage=st.lists(st.tuples(st.sampled_from(sorted(COLUMNS)), st.data(), BAD,
                                 st.integers(1, 70)), min_size=1, max_size=3))
@pytest.mark.long
def test_any_damaged_column_is_exit_0_or_2_without_a_traceback(
        damage, tmp_path_factory, monkeypatch, capsys):
    tmp_path = tmp_path_factory.mktemp("damaged")
    path = _copy(tmp_path)
    with sqlite3.connect(path) as conn:
        for table, data, value, row in damage:
            column = data.draw(st.sampled_from(COLUMNS[table]))
            # a NOT NULL or a clashing key: SQLite itself keeps that out
            with contextlib.suppress(sqlite3.IntegrityError):
                conn.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = ?", (value, row))
    conn.close()
    for args in (["runs", "--limit", "0"], ["report", QUERY_RUN, "--out", str(tmp_path / "o1")],
                 ["report", "12e2ef67", "--out", str(tmp_path / "o2")],
                 ["compare", QUERY_RUN, "c851d667"]):
        code, _, err = _knoblab(path, args, tmp_path, monkeypatch, capsys)
        assert code in (0, 2), (args, err)
        assert "Traceback" not in err and "unexpected" not in err, (args, err)
        if code == 2:
            _one_line(err)


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:",
                                 "sqlite:///file::memory:?uri=true",
                                 "sqlite:///file:kept?mode=memory&uri=true"])
def test_a_store_in_memory_is_refused_in_one_line(url: str, tmp_path, monkeypatch, capsys):
    """Every measurement would vanish at exit."""
    with pytest.raises(UserError, match="in memory"):
        Store(url)
    monkeypatch.setenv("KNOBLAB_HOME", str(tmp_path / "home"))
    code = cli.main(["--store", url, "runs"])
    line = _one_line(capsys.readouterr().err)
    assert code == 2 and "in memory" in line and "sqlite:///PATH" in line


@pytest.mark.parametrize("url", ["mysql://root@127.0.0.1/knoblab",
                                 "mariadb://root:Sekr3t@127.0.0.1/knoblab",
                                 "mysql+pymysql://root@127.0.0.1/knoblab",
                                 "oracle://u@h/x"])
def test_a_store_of_an_unsupported_kind_names_the_kinds_and_their_urls(
        url: str, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KNOBLAB_HOME", str(tmp_path / "home"))
    code = cli.main(["--store", url, "runs"])
    line = _one_line(capsys.readouterr().err)
    assert code == 2 and "sqlite:///PATH" in line and "postgresql://" in line
    assert "MySQLdb" not in line and "Sekr3t" not in line


@pytest.mark.parametrize("sql, said", [
    ("UPDATE studies SET info = 'null'", "description"),
    ("UPDATE studies SET info = '{\"spent\": \"x\"}'", "spent"),
    ("UPDATE studies SET info = '{\"owner\": {\"pid\": \"x\"}}'", "process id"),
    ("UPDATE studies SET created_at = 'x'", "start time"),
    ("UPDATE studies SET name = X'ff00'", "raw bytes"),
    ("UPDATE studies SET result = '[1]'", "result"),
])
def test_a_damaged_row_of_a_study_is_one_line(sql: str, said: str, tmp_path, monkeypatch,
                                               capsys):
    path = _copy(tmp_path)
    Store(f"sqlite:///{path}").save_study("tuned", status="done", spec_source="[tune]\n",
                                          info={"trials": 3, "spent": 12.5, "summary": "s"})
    with sqlite3.connect(path) as conn:
        conn.execute(sql)
    conn.close()
    code, _, err = _knoblab(path, ["report", "study:tuned", "--out", str(tmp_path / "out")],
                            tmp_path, monkeypatch, capsys)
    line = _one_line(err)
    assert code == 2 and "damaged" in line and said in line and str(path) in line, err
    # Listed as damaged, with the runs as ever.
    code, out, err = _knoblab(path, ["runs"], tmp_path, monkeypatch, capsys)
    flat = " ".join(out.split())
    assert code == 0 and "Traceback" not in err and "unexpected" not in err, err
    assert "damaged" in flat and "golden-grid" in flat


@pytest.mark.parametrize("run_id, path, value, said", [
    (QUERY_RUN, "$.cpu_share", "'x'", "detail cpu_share is 'x'"),
    (QUERY_RUN, "$.os", "'x'", "detail os is 'x', not an object"),
    (QUERY_RUN, "$.status", "json('[1]')", "detail status is [1]"),
    (QUERY_RUN, "$.session", "5", "detail session is 5"),
    ("12e2ef67", "$.steady", "'x'", "detail steady is 'x'"),
    ("12e2ef67", "$.steady.mean", "'x'", "detail steady.mean is 'x'"),
    ("c0fff0e2", "$.runs", "json('[1, \"a\"]')", "detail runs is 'a'"),
])
def test_details_of_the_wrong_shape_are_one_line(run_id: str, path: str, value: str, said: str,
                                                  tmp_path, monkeypatch, capsys):
    store = _copy(tmp_path, f"UPDATE trials SET details = json_set(details, '{path}', {value})"
                  " WHERE run_id = ?", run_id)
    code, _, err = _knoblab(store, ["report", run_id, "--out", str(tmp_path / "out")],
                            tmp_path, monkeypatch, capsys)
    line = _one_line(err)
    assert code == 2 and "damaged" in line and run_id in line and said in line, line
