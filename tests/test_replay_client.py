"""The replay's client (sysbench's LuaJIT threads playing a plan through libmariadb): what it
plays and counts, and how it stops."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psutil
import pytest

from knoblab.capture.fingerprint import fingerprint_id
from knoblab.workloads.base import WorkloadError
from tests.test_hardening_replay import _general, _shop, _sql, _workload

pytestmark = pytest.mark.server

CONNECT = "261125  5:00:00\t    {thread} Connect\troot@localhost on shop using Socket\n"


def _session(thread: int, *statements: str) -> str:
    return CONNECT.format(thread=thread) + "".join(
        f"\t\t    {thread} Query\t{statement}\n" for statement in statements)


def _class(measured, statement: str) -> dict:
    from knoblab.capture.fingerprint import fingerprint

    return measured.details["classes"][fingerprint_id(fingerprint(statement))]


def test_long_sessions_multiple_results_and_nulls_are_played_whole(sandbox, tmp_path: Path):
    _shop(sandbox, "CREATE PROCEDURE shop.two() BEGIN SELECT 1; SELECT a FROM t; END")
    # 3,000 statements of 1 KiB: a session's records span several of the client's reads.
    padded = [f"SELECT a FROM t WHERE id = {i % 3 + 1} /* {'x' * 1000} */" for i in range(3000)]
    log = _general(tmp_path, _session(10, *padded, "SELECT 1; SELECT a FROM t", "CALL two()",
                                      "SELECT NULL, a FROM t WHERE id = 2")
                   + _session(11, "SELECT a FROM t WHERE id = 5"))
    measured = _workload(log).replay(sandbox)
    details = measured.details
    assert details["statements"] == 3004 and details["errors"] == 0
    # Session 11's statement is of the same class (comments are no part of it); its id has no row.
    assert _class(measured, padded[0])["n"] == 3001
    assert _class(measured, padded[0])["rows"] == 3000
    # Every result of a statement is read: the one after it runs, unhindered.
    assert _class(measured, "SELECT 1; SELECT a FROM t")["rows"] == 4
    assert _class(measured, "CALL two()")["rows"] == 4
    assert _class(measured, "SELECT NULL, a FROM t WHERE id = 2")["rows"] == 1
    assert details["client_cpu_seconds"] > 0 and details["wall_seconds"] > 0


def test_the_rows_checksum_is_the_rows_whatever_their_order(sandbox, tmp_path: Path):
    _shop(sandbox)

    def checksum(statement: str, name: str) -> str:
        log = _general(tmp_path, _session(10, statement), name)
        return _class(_workload(log).replay(sandbox), statement)["checksum"]

    up = checksum("SELECT id, a FROM t ORDER BY a", "up.log")
    assert up == checksum("SELECT id, a FROM t ORDER BY a DESC", "down.log")
    assert up != checksum("SELECT id, a + 1 FROM t ORDER BY a", "plus.log")
    # A NULL is not an empty string.
    assert checksum("SELECT NULL", "null.log") != checksum("SELECT ''", "empty.log")


def _replay_connections(server) -> list[tuple[object, ...]]:
    return _sql(server, "SELECT ID FROM information_schema.PROCESSLIST "
                        "WHERE USER = 'knoblab_data'")


def _clients() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.name() == "sysbench"]


def test_a_replay_past_its_timeout_is_stopped_in_the_client_and_on_the_server(
        sandbox, tmp_path: Path, knoblab_home: Path):
    _shop(sandbox)
    log = _general(tmp_path, _session(10, "SELECT SLEEP(60)") + _session(11, "SELECT SLEEP(60)"))
    began = time.monotonic()
    with pytest.raises(WorkloadError, match="exceeded the timeout of 1 s"):
        _workload(log, timeout=1).replay(sandbox)
    assert time.monotonic() - began < 20
    assert _replay_connections(sandbox) == [] and _clients() == []
    assert not list(knoblab_home.glob("replay-*"))  # its folder is gone


def test_a_connection_the_server_kills_stops_the_replay_saying_so(sandbox, tmp_path: Path):
    _shop(sandbox)
    log = _general(tmp_path, _session(10, "SELECT SLEEP(30)", "SELECT 1"))

    def kill() -> None:
        for _ in range(200):
            found = _replay_connections(sandbox)
            if found:
                _sql(sandbox, f"KILL CONNECTION {int(found[0][0])}")  # type: ignore[call-overload]
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill)
    killer.start()
    try:
        with pytest.raises(WorkloadError, match=r"the server dropped a replay connection: "
                                                r"\((2013|1927|2006)\)"):
            _workload(log).replay(sandbox)
    finally:
        killer.join()
    assert _clients() == []
