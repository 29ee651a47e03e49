"""A running server under hostile conditions: it must never lock knoblab out of itself, and
knoblab must never take it for another.

A user without the privilege to change global settings, a setting that exists only per
connection, an original that cannot be put back: each is said in one line before anything
changes (or, for a restore, after everything else is back), and nothing stays recorded as
changed that never was. The same server reached by another address is the same server.
Against the MariaDB on 127.0.0.1:3306.
"""

from __future__ import annotations

import pymysql
import pytest

from knoblab.connection import Endpoint
from knoblab.store import Store
from tests.fakes import SERVER_WIDE
from tests.test_external import (
    _connect,
    _globals,
    _kill_9_after,
    _knoblab,
    _spec,
    originals,  # noqa: F401  (a fixture)
)

pytestmark = [pytest.mark.server, SERVER_WIDE]

PLAIN = "knoblab_plain"  # a user with every right on knoblab's database, none on the server


@pytest.fixture(scope="module")
def plain_user():
    conn = _connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{PLAIN}'@'%'")
            cur.execute(f"CREATE USER '{PLAIN}'@'%'")
            cur.execute(f"GRANT ALL ON knoblab.* TO '{PLAIN}'@'%'")
        yield PLAIN
        with conn.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{PLAIN}'@'%'")
    finally:
        conn.close()


def _one_line(out) -> str:
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    return lines[-1]


def test_a_user_who_may_not_change_settings_is_told_before_anything_changes(
        knoblab_home, tmp_path, plain_user, originals, running_database):  # noqa: F811
    store = tmp_path / "s.sqlite"
    conn = _connect()
    with conn.cursor() as cur:  # every right on this test's data, none on the server
        cur.execute(f"GRANT ALL ON {running_database}.* TO '{PLAIN}'@'%'")
    conn.close()
    out = _knoblab(knoblab_home, store, "run",
                   str(_spec(tmp_path, running_database, user=plain_user)))
    line = _one_line(out)
    assert "cannot be changed on knoblab_plain@127.0.0.1:3306" in line
    assert "SUPER or SYSTEM_VARIABLES_ADMIN" in line
    assert Store(f"sqlite:///{store}").pending_restores() == []
    assert _globals("read_buffer_size", "sort_buffer_size") == originals
    # Nothing is left to restore, and the server is not locked: root can run at once.
    nothing = _knoblab(knoblab_home, store, "restore")
    assert nothing.returncode == 0 and "nothing to restore" in nothing.stdout
    again = _knoblab(knoblab_home, store, "run",
                     str(_spec(tmp_path, running_database, name="root")))
    assert again.returncode == 0, again.stderr


def test_a_setting_that_exists_only_per_connection_is_refused(knoblab_home, tmp_path,
                                                              running_database):
    spec = _spec(tmp_path, running_database).read_text().replace(
        'sort_buffer_size = ["1M", "4M"]', 'timestamp = [1, 2]')
    path = tmp_path / "session.toml"
    path.write_text(spec)
    line = _one_line(_knoblab(knoblab_home, tmp_path / "s.sqlite", "run", str(path)))
    assert "timestamp exists only within one connection" in line


def test_restore_puts_back_what_it_can_and_names_what_it_cannot(
        knoblab_home, tmp_path, originals):  # noqa: F811
    store_path = tmp_path / "s.sqlite"
    store = Store(f"sqlite:///{store_path}")
    server = Endpoint(host="127.0.0.1", port=3306).as_dict()
    # What a killed run could leave: one setting it changed, one the server will not take back.
    conn = _connect()
    with conn.cursor() as cur:
        cur.execute("SET GLOBAL read_buffer_size = 262144")
    conn.close()
    store.save_original("deadbeef", server, "read_buffer_size", originals["read_buffer_size"])
    store.save_original("deadbeef", server, "timestamp", "0")

    out = _knoblab(knoblab_home, store_path, "restore")
    line = _one_line(out)
    assert "could not put back on root@127.0.0.1:3306: timestamp (to 0)" in line
    assert "knoblab restore deadbeef --forget" in line
    assert "put back read_buffer_size; could not put back" in line
    assert _globals("read_buffer_size") == {"read_buffer_size": originals["read_buffer_size"]}
    assert [r["name"] for r in store.pending_restores()] == ["timestamp"]

    forgotten = _knoblab(knoblab_home, store_path, "restore", "--forget")
    assert forgotten.returncode == 0, forgotten.stderr
    assert "timestamp (was 0)" in forgotten.stdout
    assert store.pending_restores() == []
    assert "nothing to restore" in _knoblab(knoblab_home, store_path, "restore").stdout


def test_the_plain_user_really_lacks_the_privilege(plain_user):
    """The premise of the first test, checked directly."""
    conn = pymysql.connect(host="127.0.0.1", port=3306, user=plain_user)
    try:
        with conn.cursor() as cur, pytest.raises(pymysql.err.OperationalError) as caught:
            cur.execute("SET GLOBAL read_buffer_size = @@GLOBAL.read_buffer_size")
        assert caught.value.args[0] == 1227
    finally:
        conn.close()


def test_the_same_server_under_another_address_is_recognised(
        knoblab_home, tmp_path, originals, running_database):  # noqa: F811
    store = tmp_path / "s.sqlite"
    spec = _spec(tmp_path, running_database, name="kill",
                 sql="SELECT SLEEP(0.4), COUNT(*) FROM dt2", repetitions=6, sort="3M")
    _kill_9_after(knoblab_home, store, spec, done=1)
    assert _globals("read_buffer_size", "sort_buffer_size") != originals
    # localhost for 127.0.0.1: another spelling, the same server with the same leftovers.
    other = _spec(tmp_path, running_database, name="other").read_text().replace(
        'host = "127.0.0.1"', 'host = "localhost"')
    path = tmp_path / "other.toml"
    path.write_text(other)
    line = _one_line(_knoblab(knoblab_home, store, "run", str(path)))
    assert "changed on root@localhost:3306; put it back first" in line
    restored = _knoblab(knoblab_home, store, "restore")
    assert restored.returncode == 0, restored.stderr
    assert _globals("read_buffer_size", "sort_buffer_size") == originals
