"""The results store on SQLite and on a shared PostgreSQL (the PostgreSQL on 127.0.0.1:5432):
the same write and read side on both, and processes making a new store at the same moment.
(Two knoblab processes writing one shared store at once, as workers of one study do, is
tests/test_tune_workers.py.)"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import psycopg
import pytest

from knoblab.errors import UserError
from knoblab.store import RunInfo, Store

ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"


@pytest.fixture(scope="module")
def postgres_url():
    """A fresh database on the local PostgreSQL, dropped afterwards."""
    name = f"knoblab_test_{uuid.uuid4().hex[:8]}"
    try:
        admin = psycopg.connect(ADMIN, autocommit=True, connect_timeout=5)
    except psycopg.Error as exc:
        pytest.fail(f"the PostgreSQL on 127.0.0.1:5432 is needed for these tests: {exc}")
    admin.execute(f"CREATE DATABASE {name}")
    yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
    admin.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    if request.param == "sqlite":
        return Store(f"sqlite:///{tmp_path / 's.sqlite'}")
    return Store(request.getfixturevalue("postgres_url"))


def test_write_side_and_read_side_agree(store):
    run_id = store.create_run(
        name="roundtrip", experiment="sweep", spec_source="[sweep]\n", server_binary="/usr/sbin/x",
        server_version="10.11", info=RunInfo(knobs=["read_buffer_size"]),
        point_list=[({"read_buffer_size": "64K"}, {"read_buffer_size": "65536"}),
                    ({"read_buffer_size": "1M"}, {"read_buffer_size": "1048576"})])
    trial = store.begin_trial(run_id, point_idx=1, repetition=0, position=0)
    store.add_second(trial, 1.0, tps=120.5, threads=4)
    store.add_os_second(trial, 1.0, {"cpu_user": 0.5, "disk_read_bytes": 4096.0})
    store.finish_trial(trial, status="done", value=0.25, effective={"read_buffer_size": "1M"},
                       details={"rows": 3, "status": {"com_select": 1}})
    store.save_original(run_id, {"host": "127.0.0.1", "port": 3306}, "sort_buffer_size",
                        "2097152")
    assert store.run(run_id[:5])["info"]["knobs"] == ["read_buffer_size"]  # by a prefix too
    assert store.points(run_id)[1] == ({"read_buffer_size": "1M"},
                                       {"read_buffer_size": "1048576"})
    (found,) = store.trials(run_id)
    assert (found.point_idx, found.status, found.value) == (1, "done", 0.25)
    assert found.details == {"rows": 3, "status": {"com_select": 1}}
    assert store.seconds(run_id)[trial][0]["tps"] == 120.5
    assert store.os_seconds(run_id)[trial][0]["disk_read_bytes"] == 4096.0
    (pending,) = store.pending_restores(run_id)
    assert (pending["name"], pending["original"]) == ("sort_buffer_size", "2097152")
    store.mark_restored(run_id, ["sort_buffer_size"])
    assert store.pending_restores(run_id) == []
    store.set_status(run_id, "done")
    assert [r["id"] for r in store.list_runs()][0] == run_id


def test_an_unreachable_store_is_one_clear_line():
    with pytest.raises(UserError, match="cannot open the results store") as caught:
        Store("postgresql://knoblab:s3cret-pw@127.0.0.1:1/nowhere")
    assert "s3cret-pw" not in str(caught.value)


OPEN_AT_ONCE = """
import sys, time
from knoblab.store import Store
start = float(sys.argv[2])
while time.time() < start:
    pass
Store("sqlite:///" + sys.argv[1]).pending_restores()
"""


def test_processes_opening_a_new_store_at_the_same_moment_all_succeed(tmp_path):
    """A run and a command reading its store (or two machines) may both find it new: the
    schema is made once, and nobody fails on a table the other just made."""
    for attempt in range(3):
        path = tmp_path / f"new-{attempt}.sqlite"
        start = f"{time.time() + 1.0:.3f}"
        openers = [subprocess.Popen([sys.executable, "-c", OPEN_AT_ONCE, str(path), start],
                                    stderr=subprocess.PIPE, text=True) for _ in range(6)]
        errors = [(p.wait(timeout=60), p.stderr.read()) for p in openers]
        for opener in openers:
            opener.stderr.close()
        assert all(code == 0 for code, _ in errors), errors
