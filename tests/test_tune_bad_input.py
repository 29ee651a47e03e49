"""knoblab tune refuses through the real CLI, before its first trial and before its study is
opened, everything a trial would refuse: exit code 2, one line, no traceback, nothing stored
and no study written. Real sandbox catalog; no server is started for a measurement.

The refusals are checks of the spec: the command runs in this process
(tests.test_bad_input.knoblab_in_process, output captured at the file descriptors). Storages
that cannot be opened are tried by a real `python -m knoblab.cli` process, as a user's would:
its imports (Optuna, SQLAlchemy, the PostgreSQL driver) and their logging are its own."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_bad_input import knoblab_in_process

pytestmark = pytest.mark.server

SPEC = """name = "search"
[server]
{server}
[dataset]
rows = 1000
[workload]
sql = "SELECT COUNT(*) FROM dt2"
{tie}
[tune]
trials = 3
rounds = 2
max_rounds = 2
validate = 1
{tune}
[tune.knobs]
{knobs}
"""
SAFE_KNOBS = 'sort_buffer_size = ["64K", "4M"]\nread_buffer_size = ["64K", "2M"]'


class Refusal:
    """`knoblab tune` of a spec in a test's folder: in this process, or as a real one."""

    def __init__(self, tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                 capfd: pytest.CaptureFixture[str]) -> None:
        self.tmp_path, self.env = tmp_path, env
        self.monkeypatch, self.capfd = monkeypatch, capfd

    def __call__(self, *, knobs: str = SAFE_KNOBS, tune: str = "", tie: str = "",
                 server: str = "", args: tuple[str, ...] = (), process: bool = False) -> str:
        """The one line `knoblab tune` refuses the spec with; nothing measured, no study
        made."""
        spec = self.tmp_path / "search.toml"
        spec.write_text(SPEC.format(knobs=knobs, tune=tune, tie=tie, server=server))
        store = self.tmp_path / "s.sqlite"
        command = ["--store", f"sqlite:///{store}", "tune", str(spec), *args]
        if process:
            result = subprocess.run([sys.executable, "-m", "knoblab.cli", *command],
                                    capture_output=True, text=True, env=self.env,
                                    cwd=self.tmp_path, timeout=240, check=False)
        else:
            result = knoblab_in_process(command, {"KNOBLAB_HOME": self.env["KNOBLAB_HOME"]},
                                        self.tmp_path, self.monkeypatch, self.capfd,
                                        store=False)
        assert "Traceback" not in result.stdout + result.stderr, result.stderr[-3000:]
        assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("knoblab: "), result.stderr
        with sqlite3.connect(store) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
            runs = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] if "runs" in tables \
                else 0
        assert runs == 0, "nothing is measured"
        assert "studies" not in tables, "no Optuna table in knoblab's store"
        assert not (self.tmp_path / "s-tune.sqlite").exists(), "no study is opened"
        return lines[0]


@pytest.fixture
def refused(tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
            capfd: pytest.CaptureFixture[str]) -> Refusal:
    return Refusal(tmp_path, env, monkeypatch, capfd)


@pytest.mark.parametrize("tune, args, words", [
    ("budget = inf", (), ["[tune] budget: inf", "longer than knoblab takes"]),
    ("budget = 1e300", (), ["[tune] budget", "longer than knoblab takes"]),
    ("budget = nan", (), ["[tune] budget: nan", "not a duration"]),
    ("", ("--budget", "99999999999999h"), ["--budget", "longer than knoblab takes"]),
])
def test_a_budget_that_is_not_finite_is_one_line_before_anything_runs(
        refused, tune, args, words):
    line = refused(tune=tune, args=args)
    for word in words:
        assert word in line


@pytest.mark.parametrize("knobs", [
    "innodb_flush_log_at_trx_commit = [0, 2]",
    'innodb_flush_log_at_trx_commit = { low = 0, high = 2, scale = "linear" }',
])
def test_unsafe_values_are_refused_before_the_search_and_before_the_scale(refused, knobs):
    line = refused(knobs=knobs)
    assert "[tune.knobs] innodb_flush_log_at_trx_commit: 0 and 2 give up durability" in line
    assert "allow_durability_tradeoff = true" in line and "log scale" not in line


@pytest.mark.parametrize("storage", ["sqlite:///s.sqlite", "sqlite:///{tmp}/s.sqlite",
                                     "sqlite:///{tmp}/../{name}/s.sqlite"])
def test_a_study_storage_that_is_the_results_store_is_refused_before_opening_it(
        tmp_path, refused, storage):
    url = storage.format(tmp=tmp_path, name=tmp_path.name)
    line = refused(tune=f'storage = "{url}"')
    assert "[tune] storage" in line and "knoblab's own results store" in line


@pytest.mark.parametrize("storage", ["postgresql://nobody@127.0.0.1:1/x"])
def test_a_study_storage_that_cannot_be_opened_is_one_line(tmp_path, refused, storage):
    line = refused(tune=f'storage = "{storage.format(tmp=tmp_path)}"', process=True)
    assert "cannot open the tuning study's storage" in line and "[tune] storage" in line


@pytest.mark.parametrize("storage, said", [
    ("postgresql://", "names no database"),
    ("postgresql://tuner@127.0.0.1", "postgresql://USER@HOST/DATABASE"),
    ("mysql://root@127.0.0.1/", "names no database"),
    ("sqlite://", "names no file"),
    ("sqlite:///{tmp}/a-folder", "is a folder; name a file in it"),
    ("sqlite:///{tmp}/no/such/folder/study.sqlite", "does not exist"),
])
def test_a_study_storage_naming_no_database_is_one_line_leaving_nothing(tmp_path, refused,
                                                                       storage, said):
    # A URL without a database put the study in the server's default one; a folder was
    # refused only after the workers' lock file was made beside it.
    (tmp_path / "a-folder").mkdir()
    line = refused(tune=f'storage = "{storage.format(tmp=tmp_path)}"')
    assert "[tune] storage" in line and said in line, line
    assert not list(tmp_path.rglob("*.lock"))


@pytest.mark.parametrize("storage", ["postgresql://tuner:hunter2@127.0.0.1/tune",
                                     "postgresql://tuner@127.0.0.1/tune?password=hunter2",
                                     "mysql+pymysql://root:p@ss:w/rd@127.0.0.1/tune"])
def test_a_password_in_the_study_storage_is_refused_and_never_shown(refused, storage):
    line = refused(tune=f'storage = "{storage}"')
    assert "[tune] storage" in line and "hunter2" not in line and "w/rd" not in line, line


@pytest.mark.parametrize("tie, knobs, words", [
    # A follower of another type than its leader: run refuses it at once, tune did after trials.
    ('[tie]\nsort_buffer_size = "innodb_adaptive_hash_index"',
     'innodb_adaptive_hash_index = ["ON", "OFF"]\nread_buffer_size = ["64K", "2M"]',
     ["[tune.knobs] innodb_adaptive_hash_index = O", "sort_buffer_size"]),
    # A follower that is searched too: named with [tune.knobs], before trial 0.
    ('[tie]\nmax_heap_table_size = "tmp_table_size"',
     'tmp_table_size = ["1M", "64M"]\nmax_heap_table_size = ["1M", "64M"]',
     ["[tie] max_heap_table_size follows tmp_table_size", "[tune.knobs]"]),
    # A leader set nowhere: the tie would silently never apply.
    ('[tie]\nmax_heap_table_size = "tmp_table_size"', SAFE_KNOBS,
     ["[tie] max_heap_table_size", "leader", "[tune.knobs]"]),
    # A setting the sandbox keeps its own (the target's rules): refused by the first trial's
    # run until now.
    ("", 'port = [3307, 3400]\nread_buffer_size = ["64K", "2M"]',
     ["[tune.knobs] port = ", "set by knoblab itself"]),
])
def test_what_a_trial_would_refuse_is_refused_before_the_first(refused, tie, knobs, words):
    line = refused(tie=tie, knobs=knobs)
    for word in words:
        assert word in line


def _another_programs(path: Path) -> Path:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, what TEXT)")
        db.execute("INSERT INTO runs (what) VALUES ('theirs')")
    db.close()
    return path


def _another_homes_store(path: Path) -> Path:
    from knoblab.store import Store

    Store(f"sqlite:///{path}").engine.dispose()
    return path


@pytest.mark.parametrize("make, said", [
    (_another_programs, "another program's database (its tables: runs)"),
    (_another_homes_store, "a knoblab results store"),
])
def test_a_study_storage_that_is_not_empty_nor_optuna_is_refused_before_opening_it(
        tmp_path, refused, make, said):
    """Optuna would write its tables into it (and fail on a knoblab store's own `trials`)."""
    other = make(tmp_path / "other.sqlite")
    before = other.read_bytes()
    line = refused(tune=f'storage = "sqlite:///{other}"')
    assert "[tune] storage" in line and said in line and "not" in line, line
    assert other.read_bytes() == before, "nothing is written into it"


def test_a_postgresql_study_storage_with_other_tables_is_refused_before_opening_it(refused):
    import uuid

    import psycopg

    name = f"knoblab_other_{uuid.uuid4().hex[:8]}"
    admin = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        with psycopg.connect(f"host=127.0.0.1 port=5432 user=postgres dbname={name}",
                             autocommit=True) as conn:
            conn.execute("CREATE TABLE invoices (id integer)")
        line = refused(tune=f'storage = "postgresql://postgres@127.0.0.1:5432/{name}"',
                       process=True)
        assert "another program's database (its tables: invoices)" in line, line
        with psycopg.connect(f"host=127.0.0.1 port=5432 user=postgres dbname={name}") as conn:
            tables = {r[0] for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        assert tables == {"invoices"}, "no Optuna table written"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_an_optuna_storage_and_an_empty_file_pass_the_storage_check(tmp_path):
    import optuna

    from knoblab.search.study import check_not_the_store
    from knoblab.store import Store

    store = Store(f"sqlite:///{tmp_path / 'knoblab.sqlite'}")
    optuna_file, empty = tmp_path / "study.sqlite", tmp_path / "empty.sqlite"
    optuna.create_study(storage=f"sqlite:///{optuna_file}", study_name="s")
    empty.touch()
    for path in (optuna_file, empty, tmp_path / "new.sqlite"):
        check_not_the_store(f"sqlite:///{path}", store)
    assert not (tmp_path / "new.sqlite").exists()
