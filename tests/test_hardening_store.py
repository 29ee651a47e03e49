"""The results store's boundary: whatever URL, file or database a user points knoblab at, and
whatever happens to it while knoblab works, the user gets one line naming the store and what
is wrong (exit 2), never a password and never a traceback; what was stored stays stored.

PostgreSQL cases use the local PostgreSQL on 127.0.0.1:5432 (trust authentication: a password
given is carried to the server, which ignores it); the file-system cases mount small tmpfs."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, unquote

import psycopg
import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

import knoblab.store as store_module
import knoblab.store.base as store_base
import knoblab.store.schema as store_schema
from knoblab import cli
from knoblab.errors import UserError
from knoblab.store import RunInfo, Store

ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
GOLDEN = Path(__file__).parent / "data" / "golden" / "store.sqlite"
SECRET = "Sekr3t"  # a part of every password below: it must never be shown


@pytest.fixture
def admin() -> Iterator[psycopg.Connection]:
    try:
        connection = psycopg.connect(ADMIN, autocommit=True, connect_timeout=5)
    except psycopg.Error as exc:
        pytest.fail(f"the PostgreSQL on 127.0.0.1:5432 is needed for these tests: {exc}")
    yield connection
    connection.close()


@pytest.fixture
def pg_database(admin: psycopg.Connection) -> Iterator[str]:
    """A fresh database's name, dropped afterwards."""
    name = f"knoblab_hard_{uuid.uuid4().hex[:8]}"
    admin.execute(f"CREATE DATABASE {name}")
    yield name
    admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _remount_read_only(folder: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)


def _knoblab(args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
             capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """The command line, in this process: its exit code and its stderr."""
    monkeypatch.setenv("KNOBLAB_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KNOBLAB_STORE", raising=False)
    code = cli.main(args)
    return code, capsys.readouterr().err


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "unexpected" not in err, err
    return lines[0]


def _a_run(store: Store, name: str = "kept") -> str:
    run_id = store.create_run(name=name, experiment="sweep", spec_source="[sweep]\n",
                              server_binary="/usr/sbin/mariadbd", server_version="10.11",
                              info=RunInfo(knobs=["read_buffer_size"]),
                              point_list=[({"read_buffer_size": "64K"},
                                           {"read_buffer_size": "65536"})])
    trial = store.begin_trial(run_id, point_idx=0, repetition=0, position=0)
    store.finish_trial(trial, status=store_module.TrialState.DONE, value=0.5)
    return run_id


# --------------------------------------------------------------------------- 1. URLs


@pytest.mark.parametrize("written, password", [
    (f"pa:{SECRET}", f"pa:{SECRET}"),
    (f"pa/{SECRET}", f"pa/{SECRET}"),
    (f"p#{SECRET}?x", f"p#{SECRET}?x"),
    (f"p%40{SECRET}%3A%2F%23%25", f"p@{SECRET}:/#%"),  # percent-encoded as the user should
    (f"50%{SECRET}", f"50%{SECRET}"),  # a % that begins no escape is kept as written
])
def test_a_password_with_url_characters_reaches_the_server_intact(
        written: str, password: str, pg_database: str):
    store = Store(f"postgresql://postgres:{written}@127.0.0.1:5432/{pg_database}")
    with store.engine.connect() as conn:
        assert conn.connection.driver_connection.info.password == password
    _a_run(store)
    assert SECRET not in store.name and SECRET not in repr(store.engine.url)


@pytest.mark.parametrize("url, said", [
    (f"postgresql://knob:p@{SECRET}@127.0.0.1:5432/x", ["more than one '@'", "%40"]),
    (f"postgresql://knob:p@ss:{SECRET}/x@127.0.0.1:5432/x", ["more than one '@'", "%40"]),
    (f"postgresql://knob:{SECRET}@127.0.0.1:word/x", ["port 'word'", "not a number"]),
    (f"postgresql://knob:{SECRET}@127.0.0.1:99999/x", ["port 99999", "1 to 65535"]),
    (f"postgresql://knob:{SECRET}@h1:5432,h2:5433/x", ["?host=", "several"]),
    (f"postgresql:/knob:{SECRET}@127.0.0.1/x", ["not a database URL"]),
    (f"nosuchdb://knob:{SECRET}@127.0.0.1/x", ["cannot open the results store"]),
])
def test_a_url_that_cannot_work_is_one_line_without_its_password(
        url: str, said: list[str], tmp_path, monkeypatch, capsys):
    with pytest.raises(UserError) as caught:
        Store(url)
    message = str(caught.value)
    assert all(s in message for s in said), message
    assert SECRET not in message
    code, err = _knoblab(["--store", url, "runs"], tmp_path, monkeypatch, capsys)
    assert code == 2 and SECRET not in err and _one_line(err)


URL_TEXT = st.text(st.sampled_from(list(":/@#%?[]!$&'()*+,;= aZ0")) |
                   st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), max_size=12)


@settings(max_examples=400, deadline=None)
@given(before=URL_TEXT, after=URL_TEXT, port=st.sampled_from(["", ":5432", ":word", ":0"]))
def test_any_password_is_read_as_meant_or_refused_without_being_shown(before: str, after: str,
                                                                      port: str):
    """Percent-encoded, any password arrives as it was; written as it is, it arrives as
    written (a %XX in it decoded) or the URL is refused in one line: never a crash, never a
    password in a message."""
    password = before + SECRET + after
    encoded = f"postgresql://knob:{quote(password, safe='')}@db.example{port}/k"
    raw = f"postgresql://knob:{password}@db.example{port}/k"
    for url in (encoded, raw):
        try:
            parsed = store_module.parse_url(url)
        except UserError as exc:
            assert SECRET not in str(exc)
            assert url == raw or port in (":word", ":0"), exc
            continue
        assert (parsed.host, parsed.database, parsed.port) == ("db.example", "k",
                                                               5432 if port else None)
        assert parsed.password == (password if url == encoded else unquote(password))
        assert SECRET not in store_module.safe_url(url)
        assert SECRET not in store_module.safe_url(store_module.driver_url(url))
        assert SECRET not in store_module.hide_passwords(f"knoblab --store {url} runs")


def test_passwords_are_hidden_in_any_text():
    text = (f"knoblab --store postgresql://tuner:p@{SECRET}@db:5432/k runs\n"
            f"storage = mysql+pymysql://u:{SECRET}/x@h/y and sqlite:////tmp/a@b/s.sqlite")
    hidden = store_module.hide_passwords(text)
    assert SECRET not in hidden
    assert "postgresql://tuner:***@db:5432/k runs" in hidden
    assert "sqlite:////tmp/a@b/s.sqlite" in hidden
    assert SECRET not in store_module.safe_url(f"postgresql://u:p@{SECRET}@h/x")


def test_no_password_reaches_the_store(pg_database: str):
    store = Store(f"postgresql://postgres:pw{SECRET}@127.0.0.1:5432/{pg_database}")
    run_id = _a_run(store)
    store.save_original(run_id, {"host": "127.0.0.1"}, "sort_buffer_size", "1")
    store.set_status(run_id, "done")
    with psycopg.connect(f"host=127.0.0.1 user=postgres dbname={pg_database}") as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        for table in tables:
            for row in conn.execute(f"SELECT * FROM {table}"):
                assert SECRET not in repr(row)


def test_a_sqlite_path_with_url_characters_is_the_file_meant(tmp_path: Path):
    """The default store of a home whose path holds ? or % is that very file."""
    home = tmp_path / "a?b%20c#d"
    home.mkdir()
    store = Store(store_module.default_url(home))
    _a_run(store)
    assert (home / "knoblab.sqlite").stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a?b%20c#d"]


def test_a_question_mark_in_a_sqlite_path_is_not_taken_for_options(tmp_path: Path):
    """sqlite:///x?y.sqlite would silently be the file x."""
    with pytest.raises(UserError, match="%3F"):
        Store(f"sqlite:///{tmp_path / 'x?y.sqlite'}")
    assert list(tmp_path.iterdir()) == []
    path = tmp_path / "x?y.sqlite"
    Store(f"sqlite:///{tmp_path / 'x%3Fy.sqlite'}")
    assert path.exists()


# --------------------------------------------------------------------------- 2. foreign stores


def test_another_programs_database_with_a_runs_table_is_refused(tmp_path, monkeypatch, capsys):
    path = tmp_path / "places.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE runs (a INTEGER, b TEXT)")
        conn.execute("INSERT INTO runs VALUES (1, 'theirs')")
    before = path.read_bytes()
    code, err = _knoblab(["--store", f"sqlite:///{path}", "runs"], tmp_path, monkeypatch,
                         capsys)
    line = _one_line(err)
    assert code == 2 and str(path) in line and "not a knoblab results store" in line
    assert path.read_bytes() == before  # nothing written into it


def test_another_programs_database_without_clashing_tables_is_refused(tmp_path: Path):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE moz_places (id INTEGER)")
    with pytest.raises(UserError, match=r"not a knoblab results store.*moz_places"):
        Store(f"sqlite:///{path}")
    with sqlite3.connect(path) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["moz_places"]


def test_an_optuna_database_is_not_taken_for_a_store(pg_database: str):
    """Optuna's storage has a `trials` table of its own."""
    with psycopg.connect(f"host=127.0.0.1 user=postgres dbname={pg_database}",
                         autocommit=True) as conn:
        conn.execute("CREATE TABLE trials (trial_id INTEGER PRIMARY KEY, number INTEGER)")
    with pytest.raises(UserError, match=r"not a knoblab results store.*trials"):
        Store(f"postgresql://postgres@127.0.0.1:5432/{pg_database}")


def test_an_empty_file_and_a_new_path_become_stores(tmp_path: Path):
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    for path in (empty, tmp_path / "new.sqlite"):
        store = Store(f"sqlite:///{path}")
        _a_run(store)
        assert Store(f"sqlite:///{path}").list_runs()[0]["name"] == "kept"


def test_a_store_of_an_older_knoblab_is_read_and_left_as_it_was(tmp_path: Path):
    path = tmp_path / "old.sqlite"
    shutil.copy(GOLDEN, path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    assert Store(f"sqlite:///{path}").list_runs(limit=3)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_store_of_a_newer_knoblab_is_refused(backend: str, tmp_path: Path, request):
    url = (f"sqlite:///{tmp_path / 's.sqlite'}" if backend == "sqlite" else
           f"postgresql://postgres@127.0.0.1:5432/{request.getfixturevalue('pg_database')}")
    store = Store(url)
    _a_run(store)
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE knoblab_store SET version = version + 1"))
    with pytest.raises(UserError, match="newer knoblab"):
        Store(url)


# --------------------------------------------------------------------------- 3. damaged stores


def _damaged(tmp_path: Path) -> Path:
    path = tmp_path / "damaged.sqlite"
    shutil.copy(GOLDEN, path)
    with path.open("r+b") as f:  # a page of the data zeroed, the header and schema intact
        f.seek(4096 * 3)
        f.write(b"\0" * 4096)
    return path


@pytest.mark.parametrize("command", [["report", "latest"], ["compare", "latest", "latest"]])
def test_a_store_with_a_zeroed_page_is_one_line(command: list[str], tmp_path, monkeypatch,
                                                capsys):
    path = _damaged(tmp_path)
    code, err = _knoblab(["--store", f"sqlite:///{path}", *command, *(
        ["--out", str(tmp_path / "out")] if command[0] == "report" else [])],
        tmp_path, monkeypatch, capsys)
    line = _one_line(err)
    assert code == 2 and str(path) in line and "damaged" in line and ".recover" in line


def test_a_damaged_store_is_named_by_every_command_that_reads_it(tmp_path: Path):
    store = Store(f"sqlite:///{_damaged(tmp_path)}")
    run_id = store.list_runs(limit=1)[0]["id"]
    with pytest.raises(UserError, match="damaged"):
        for run in store.list_runs(limit=None):
            store.points(run["id"])
            store.trials(run["id"])
            store.seconds(run["id"])
            store.os_seconds(run["id"])
    assert run_id


def test_a_value_damaged_inside_a_row_is_one_line(tmp_path, monkeypatch, capsys):
    """Damage SQLite cannot see: a stored JSON text cut short."""
    path = tmp_path / "s.sqlite"
    run_id = _a_run(Store(f"sqlite:///{path}"))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE trials SET details = substr(details, 1, 1) || '\"cut'")
    code, err = _knoblab(["--store", f"sqlite:///{path}", "report", run_id, "--out",
                          str(tmp_path / "out")], tmp_path, monkeypatch, capsys)
    line = _one_line(err)
    assert code == 2 and str(path) in line and "damaged" in line and run_id in line


@pytest.mark.parametrize("kind", ["truncated", "garbage", "folder", "device", "unreachable"])
def test_unusable_stores_stay_one_line(kind: str, tmp_path, monkeypatch, capsys):
    path = tmp_path / "s.sqlite"
    if kind == "truncated":
        path.write_bytes(GOLDEN.read_bytes()[:5000])
    elif kind == "garbage":
        path.write_bytes(b"not a database at all\n" * 100)
    elif kind == "folder":
        path.mkdir()
    elif kind == "device":
        path = Path("/dev/null")
    url = ("postgresql://knob:pw@127.0.0.1:1/nowhere" if kind == "unreachable"
           else f"sqlite:///{path}")
    code, err = _knoblab(["--store", url, "runs"], tmp_path, monkeypatch, capsys)
    line = _one_line(err)
    assert code == 2 and "results store" in line
    if kind != "unreachable":
        assert str(path) in line
    if kind == "folder":
        assert "is a folder" in line


# --------------------------------------------------------------------------- 4. unwritable


def test_a_store_in_a_missing_folder_is_named(tmp_path: Path):
    with pytest.raises(UserError, match=r"folder .*/missing does not exist"):
        Store(f"sqlite:///{tmp_path / 'missing' / 's.sqlite'}")


def test_a_store_under_a_file_is_named(tmp_path: Path):
    (tmp_path / "plain").write_text("x")
    with pytest.raises(UserError, match=r"/plain is a file, not a folder"):
        Store(f"sqlite:///{tmp_path / 'plain' / 's.sqlite'}")


def test_a_store_on_a_read_only_file_system_is_read_but_not_written(tmpfs):
    folder = tmpfs(4)
    path = folder / "s.sqlite"
    writer = Store(f"sqlite:///{path}")
    _a_run(writer)
    writer.engine.dispose()  # a file open for writing would keep the mount busy
    _remount_read_only(folder)
    store = Store(f"sqlite:///{path}")
    assert store.list_runs()[0]["name"] == "kept"  # reports still work
    with pytest.raises(UserError, match=rf"{path}.*read-only"):
        store.check_writable()
    with pytest.raises(UserError, match="read-only"):  # and a write later is one line too
        _a_run(store)


@pytest.mark.parametrize("command", [["run", "{spec}"], ["tune", "{spec}"], ["restore"]])
def test_commands_that_write_refuse_a_read_only_store_before_anything_runs(
        command: list[str], tmpfs, tmp_path, monkeypatch, capsys):
    folder = tmpfs(4)
    path = folder / "s.sqlite"
    writer = Store(f"sqlite:///{path}")
    _a_run(writer)
    writer.engine.dispose()
    _remount_read_only(folder)
    spec = tmp_path / "spec.toml"
    spec.write_text("[dataset]\nrows = 1000\n[workload]\nsql = \"SELECT 1\"\n"
                    "[sweep]\nread_buffer_size = [\"64K\", \"128K\"]\n")
    code, err = _knoblab(["--store", f"sqlite:///{path}",
                          *(a.format(spec=spec) for a in command)], tmp_path, monkeypatch,
                         capsys)
    line = _one_line(err)
    assert code == 2 and str(path) in line and "read-only" in line


def test_a_new_store_on_a_read_only_file_system_is_named(tmpfs):
    folder = tmpfs(1)
    _remount_read_only(folder)
    with pytest.raises(UserError, match=rf"{folder}.*read-only"):
        Store(f"sqlite:///{folder / 's.sqlite'}")


def test_a_disk_that_fills_during_a_run_is_one_line_and_keeps_what_was_stored(tmpfs):
    folder = tmpfs(2)
    store = Store(f"sqlite:///{folder / 's.sqlite'}")
    kept = _a_run(store)
    trial = store.begin_trial(kept, point_idx=0, repetition=1, position=1)
    with (folder / "filler").open("wb", buffering=0) as filler, pytest.raises(OSError):
        while True:
            filler.write(b"\0" * 65536)
    with pytest.raises(UserError, match=r"s\.sqlite: its disk is full.*stored before is kept"):
        for t in range(100_000):  # per-second figures until the disk refuses them
            store.add_second(trial, float(t), tps=1.0, threads=1)
    (folder / "filler").unlink()
    assert [t.value for t in Store(f"sqlite:///{folder / 's.sqlite'}").trials(kept)
            if t.status == "done"] == [0.5]


def test_a_store_on_a_full_file_system_is_refused_before_anything_runs(tmpfs):
    folder = tmpfs(2)
    path = folder / "s.sqlite"
    store = Store(f"sqlite:///{path}")
    store.check_writable()  # room enough
    with (folder / "filler").open("wb", buffering=0) as filler, pytest.raises(OSError):
        while True:
            filler.write(b"\0" * 65536)
    with pytest.raises(UserError, match=rf"{folder}.*(full|free)"):
        store.check_writable()


# --------------------------------------------------------------------------- 5. numbers


def test_a_limit_beyond_any_database_is_all_runs(tmp_path, monkeypatch, capsys):
    path = tmp_path / "s.sqlite"
    store = Store(f"sqlite:///{path}")
    _a_run(store)
    assert [r["name"] for r in store.list_runs(limit=10**23)] == ["kept"]
    code, err = _knoblab(["--store", f"sqlite:///{path}", "runs", "--limit",
                          "99999999999999999999999"], tmp_path, monkeypatch, capsys)
    assert code == 0, err


# --------------------------------------------------------------------------- 6. in use


LOCK_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
"""


def test_a_store_locked_by_another_process_is_one_line(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(store_base, "LOCK_WAIT", 0.2)
    monkeypatch.setattr(store_base, "RETRY_FOR", 0.5)
    path = tmp_path / "s.sqlite"
    store = Store(f"sqlite:///{path}")
    run_id = _a_run(store)
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(UserError, match=rf"{path}.*locked by another process"):
            store.set_status(run_id, "done")
    finally:
        holder.communicate("")
    store.set_status(run_id, "done")  # usable again once released
    assert store.run(run_id)["status"] == "done"


def _backend_waiting(admin: psycopg.Connection, database: str) -> int:
    """The process id of the store's connection once it waits for a lock."""
    for _ in range(60_000):  # it waits within moments; bounded so that a fault cannot hang
        row = admin.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s AND "
                            "wait_event_type = 'Lock'", (database,)).fetchone()
        if row:
            return int(row[0])
        time.sleep(0.001)
    pytest.fail("the store's write never waited for the lock")


def test_a_connection_lost_mid_write_is_taken_again_and_nothing_is_lost(
        pg_database: str, admin: psycopg.Connection):
    store = Store(f"postgresql://postgres@127.0.0.1:5432/{pg_database}")
    run_id = _a_run(store)
    blocker = psycopg.connect(f"host=127.0.0.1 user=postgres dbname={pg_database}")
    blocker.execute("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE")
    failure: list[BaseException] = []

    def write() -> None:
        try:
            store.set_status(run_id, "done")
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            failure.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    admin.execute("SELECT pg_terminate_backend(%s)", (_backend_waiting(admin, pg_database),))
    blocker.rollback()
    blocker.close()
    writer.join()
    assert failure == []
    assert store.run(run_id)["status"] == "done"
    assert [t.value for t in store.trials(run_id)] == [0.5]


def test_a_database_that_goes_away_is_one_line(pg_database: str, admin, monkeypatch):
    store = Store(f"postgresql://postgres:{SECRET}@127.0.0.1:5432/{pg_database}")
    run_id = _a_run(store)
    admin.execute(f"DROP DATABASE {pg_database} WITH (FORCE)")
    with pytest.raises(UserError, match=rf"results store .*{pg_database}.*does not exist.*"
                                        "what was stored before is kept") as caught:
        store.set_status(run_id, "done")
    assert SECRET not in str(caught.value)


PROXY = """
import socket, sys, threading
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)

def pipe(source, sink):
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass

while True:
    client, _ = server.accept()
    upstream = socket.create_connection(("127.0.0.1", 5432))
    threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
    threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
"""


def test_a_server_gone_for_good_is_waited_for_once(pg_database: str, monkeypatch):
    """A lost store is tried again for a while; the clean-up after that failure (the run's
    status, its claim) does not wait as long again for each of its statements."""
    # A proxy to the local PostgreSQL, the store's only way to its server: killed, the
    # server is gone for the store (its connection cut, new ones refused).
    proxy = subprocess.Popen([sys.executable, "-c", PROXY], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proxy.stdout.readline())
        store = Store(f"postgresql://postgres@127.0.0.1:{port}/{pg_database}")
        run_id = _a_run(store)
    finally:
        proxy.kill()
        proxy.wait()
    pauses: list[float] = []
    monkeypatch.setattr(store_base, "RETRY_FOR", 2.0)
    monkeypatch.setattr(store_base.time, "sleep", pauses.append)
    with pytest.raises(UserError, match=rf"results store .*{port}.*cannot be reached.*what "
                                        "was stored before is kept"):
        store.set_status(run_id, "failed")
    assert pauses  # waited for it to come back
    pauses.clear()
    with pytest.raises(UserError, match="results store"):
        store.unlock_run(run_id, "token")
    assert pauses == []  # and not again


def test_a_read_only_database_user_is_refused_before_anything_runs(pg_database: str, admin):
    role = f"knoblab_ro_{uuid.uuid4().hex[:8]}"
    _a_run(Store(f"postgresql://postgres@127.0.0.1:5432/{pg_database}"))
    admin.execute(f"CREATE ROLE {role} LOGIN")
    try:
        with psycopg.connect(f"host=127.0.0.1 user=postgres dbname={pg_database}",
                             autocommit=True) as conn:
            conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
        store = Store(f"postgresql://{role}@127.0.0.1:5432/{pg_database}")
        assert store.list_runs()[0]["name"] == "kept"  # it may read
        with pytest.raises(UserError, match=rf"{role}.*may not write"):
            store.check_writable()
        with pytest.raises(UserError, match="may not write"):
            _a_run(store)
    finally:
        admin.execute(f"DROP DATABASE {pg_database} WITH (FORCE)")
        admin.execute(f"DROP ROLE {role}")


def test_a_database_user_that_may_not_create_the_tables_is_one_line(pg_database: str, admin):
    role = f"knoblab_ro_{uuid.uuid4().hex[:8]}"
    admin.execute(f"CREATE ROLE {role} LOGIN")
    try:
        with pytest.raises(UserError, match=rf"cannot open the results store .*{role}.*"
                                            "may not write"):
            Store(f"postgresql://{role}@127.0.0.1:5432/{pg_database}")
    finally:
        admin.execute(f"DROP DATABASE {pg_database} WITH (FORCE)")
        admin.execute(f"DROP ROLE {role}")


def test_a_writable_store_passes_the_check_and_keeps_nothing_of_it(tmp_path: Path,
                                                                  pg_database: str):
    for url in (f"sqlite:///{tmp_path / 's.sqlite'}",
                f"postgresql://postgres@127.0.0.1:5432/{pg_database}"):
        store = Store(url)
        store.check_writable()
        assert store.list_runs() == [] and store.pending_restores() == []
        with store.engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(
                store_schema.trials)).scalar() == 0
