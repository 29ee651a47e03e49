"""Shared fixtures: one private knoblab home per test session, the real server binary, the
CLI's environment, small file systems, the fake servers, a database of each test's own on the
running server; and the check, when the session ends, that it left nothing behind."""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from hypothesis import settings

# The suite runs tests side by side: a tune's validations would all run beside the others'
# load and be measured twice. Only the test of that check looks at other programs' load.
os.environ.setdefault("KNOBLAB_BUSY_BESIDE", "64")

from knoblab.server.binary import ServerBinary, find_binary
from tests.fakes import RUNNING, SERVER_WIDE, cli_env
from tests.temp_policy import shared_templates

# The suite's property tests draw the same examples on every run, so that a red run is one a
# change caused; HYPOTHESIS_PROFILE=explore draws new ones (run it to look for new failures).
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@pytest.fixture(scope="session", autouse=True)
def knoblab_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh $KNOBLAB_HOME for the whole session. Set from the first test on, so that no
    test writes to the user's own (~/.knoblab). Its data templates are the whole run's, shared
    by the xdist workers (knoblab builds each once, under a lock, as for users' processes side
    by side; tests/temp_policy.py); its sandboxes are this worker's own."""
    from knoblab.server.sandbox import reap_orphans

    home = tmp_path_factory.mktemp("knoblab-home")
    (home / "templates").symlink_to(shared_templates(tmp_path_factory),
                                    target_is_directory=True)
    os.environ["KNOBLAB_HOME"] = str(home)
    yield home
    # The sandboxes of a knoblab the tests killed (kill -9) are cleared by the next start in
    # this home, as a user's next run clears them: after the last test there is none.
    reap_orphans(home)


@pytest.fixture(scope="session")
def binary() -> ServerBinary:
    """The MariaDB (or MySQL) server binary from PATH; the tests need a real one."""
    return find_binary()


@pytest.fixture
def sandbox(binary: ServerBinary, knoblab_home: Path) -> Iterator[Any]:
    """A sandbox server of the default template, for this test alone."""
    from knoblab.server.sandbox import Sandbox, base_template

    with Sandbox(binary, base_template(binary, knoblab_home) / "data", {},
                 home=knoblab_home) as server:
        yield server


@pytest.fixture(scope="session")
def catalog(binary: ServerBinary, knoblab_home: Path):
    from knoblab.server.sandbox import catalog_for

    return catalog_for(binary, knoblab_home)


@pytest.fixture(scope="session")
def env(knoblab_home: Path, catalog) -> dict[str, str]:
    """The CLI's environment (`fakes.cli_env`): the session home, its catalog already built."""
    return cli_env(knoblab_home)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """A maker of small file systems: `tmpfs(megabytes)` mounts a tmpfs of that size in the
    test's folder (a full disk, a read-only one: root only, else the test is skipped);
    unmounted after."""
    mounts: list[Path] = []

    def make(megabytes: int) -> Path:
        if os.geteuid() != 0:
            pytest.skip("needs root to mount a tmpfs")
        folder = tmp_path / f"tmpfs-{len(mounts)}"
        folder.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}M", "tmpfs",
                        str(folder)], check=True)
        mounts.append(folder)
        return folder

    yield make
    for folder in mounts:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.fixture
def short_folder() -> Iterator[Path]:
    """A folder of this test's own in the system temp directory, for what needs a short path
    (a unix socket's is limited to about 107 bytes); removed after."""
    folder = Path(tempfile.mkdtemp(prefix="knoblab-test-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def fake_servers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`knoblab run`, `resume` and `tune` measure the fake workload on the fake server (a
    faster sort_buffer_size from 16M on), with a home in the test's folder."""
    from knoblab import runner, workloads
    from knoblab import search as tune_module
    from tests import fakes

    monkeypatch.setenv("KNOBLAB_HOME", str(tmp_path / "home"))
    monkeypatch.setitem(workloads.KINDS, fakes.FakeWorkload.kind, fakes.FakeWorkload)
    monkeypatch.setattr(fakes, "SCRIPT", fakes.Script(
        model=lambda s: 1.0 if int(s.get("sort_buffer_size", 2 << 20)) < 16 << 20 else 0.8))
    for module, name in ((runner, "start_run"), (runner, "resume_run"), (tune_module, "tune")):
        monkeypatch.setattr(module, name, functools.partial(getattr(module, name),
                                                            open_servers=fakes.open_fake))


# --------------------------------------------------------------------- the running server

# This test session's name, handed to its xdist workers: the databases its tests make on the
# running server carry it, so that sessions side by side (a test's own pytest inside another)
# leave each other's alone.
_SESSION = pytest.StashKey[str]()
_made = itertools.count(1)


def pytest_configure(config: pytest.Config) -> None:
    given = getattr(config, "workerinput", {}).get("knoblab_session")
    config.stash[_SESSION] = given or uuid.uuid4().hex[:6]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long tests first: the workers take tests in this order, one at a time, and a run
    that met a long test last would end waiting on it alone while the other workers idle."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)  # stable: else as found


@pytest.hookimpl(optionalhook=True)  # an xdist hook: its controller starting a worker
def pytest_configure_node(node: Any) -> None:
    node.workerinput["knoblab_session"] = node.config.stash[_SESSION]


def running_connection() -> pymysql.Connection | None:
    """root on the running server; None when nothing answers there."""
    try:
        return pymysql.connect(**RUNNING, password="", connect_timeout=2, autocommit=True,
                               ssl_disabled=True)
    except pymysql.MySQLError:
        return None


def _drop_databases(names: list[str], only_knoblabs: bool) -> list[str]:
    """Those of `names` on the running server dropped (`only_knoblabs`: those knoblab made,
    marked by its OWNER_TABLE; one of that name it did not make is left alone)."""
    from knoblab.server.external import OWNER_TABLE

    conn = running_connection()
    if conn is None:
        return []
    dropped = []
    try:
        with conn.cursor() as cur:
            for name in names:
                if only_knoblabs and not cur.execute(
                        "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND "
                        "TABLE_NAME = %s", (name, OWNER_TABLE)):
                    continue
                if cur.execute(f"DROP DATABASE IF EXISTS `{name}`"):
                    dropped.append(name)
    finally:
        conn.close()
    return dropped


@pytest.fixture
def running_database(request: pytest.FixtureRequest) -> Iterator[str]:
    """A database name of this test's own for [server] database on the running server, so
    that tests there can run side by side; dropped after the test if knoblab made it."""
    worker = getattr(request.config, "workerinput", {}).get("workerid", "main")
    name = f"knoblab_{request.config.stash[_SESSION]}_{worker}_{next(_made)}"
    yield name
    _drop_databases([name], only_knoblabs=True)


@pytest.fixture
def running_server(running_database: str) -> dict[str, object]:
    """The [server] section of a run on the running server (root, no password), its data in a
    database of this test's own."""
    return {"kind": "external", **RUNNING, "database": running_database}


class _ServerWideLock:
    """A named lock on the running server, held by a connection of this process while it runs
    server-wide tests (`fakes.SERVER_WIDE`): one at a time, in every worker and session."""

    NAME = "knoblab-tests-server-wide"

    def __init__(self) -> None:
        self.conn: pymysql.Connection | None = None

    def hold(self) -> None:
        if self.conn is not None:
            return
        conn = running_connection()
        if conn is None:
            return  # nothing answers there: the tests say so themselves
        with conn.cursor() as cur:
            cur.execute("SELECT GET_LOCK(%s, 3600)", (self.NAME,))
            if _one_value(cur) != 1:
                conn.close()
                pytest.fail("the running server's lock for server-wide tests was not free "
                            "within an hour")
        self.conn = conn

    def release(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(pymysql.MySQLError):
                self.conn.close()  # the server frees a closed connection's locks
            self.conn = None


_server_wide_lock = _ServerWideLock()


def _server_wide(item: pytest.Item | None) -> bool:
    return item is not None and any(mark.args == SERVER_WIDE.mark.args
                                    for mark in item.iter_markers("xdist_group"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """A server-wide test runs holding the running server's lock, set-up and tear-down
    included; kept on to the next one of its module, whose module fixtures (a user, a
    database) live on between them."""
    if _server_wide(item):
        _server_wide_lock.hold()
    try:
        return (yield)
    finally:
        if not (_server_wide(nextitem) and getattr(nextitem, "module", None) is
                getattr(item, "module", None)):
            _server_wide_lock.release()


# --------------------------------------------------------------------- nothing left behind

_BEFORE = pytest.StashKey[dict[str, Any]]()
_LEFT = pytest.StashKey[list[str]]()
# What knoblab and the tests make in the system temp directory: sandboxes' socket folders
# (knoblab-), the tests' own short folders (knoblab-test-).
_TEMP_PREFIX = "knoblab-"


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")  # an xdist worker: its controller checks at the end


def _server_now() -> Any:
    conn = running_connection()
    if conn is None:
        return None
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT NOW()")
            return _one_value(cur)
    finally:
        conn.close()


def _one_value(cur: Any) -> Any:
    row = cur.fetchone()
    return row[0] if row else None


def pytest_sessionstart(session: pytest.Session) -> None:
    if _is_worker(session.config):
        return
    session.config.stash[_BEFORE] = {
        "temp": {p.name for p in Path(tempfile.gettempdir()).glob(_TEMP_PREFIX + "*")},
        "server_now": _server_now(),
    }


def _live_socket_in(folder: Path) -> bool:
    """Whether a server listens on a socket in `folder` (another session's, running now)."""
    for path in folder.glob("*.sock"):
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as probe:
            probe.connect(str(path))
            return True
    return False


def _temp_left(before: set[str]) -> list[str]:
    """Folders this session made in the system temp directory and left there."""
    left = []
    for path in sorted(Path(tempfile.gettempdir()).glob(_TEMP_PREFIX + "*")):
        if path.name not in before and path.exists() and not _live_socket_in(path):
            left.append(f"{path} (in the system temp directory)")
    return left


def _databases_left(session: str, server_now: Any) -> list[str]:
    """Databases this session's tests made on the running server and left there: its own
    names, and knoblab's default one if this session made it. Dropped, for the next run."""
    from knoblab.connection import DATABASE
    from knoblab.server.external import OWNER_TABLE

    conn = running_connection()
    if conn is None:
        return []
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE "
                        "SCHEMA_NAME LIKE %s", (f"knoblab\\_{session}\\_%",))
            names = [str(row[0]) for row in cur.fetchall()]
            if server_now is not None and cur.execute(
                    "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND "
                    "TABLE_NAME = %s", (DATABASE, OWNER_TABLE)):
                cur.execute(f"SELECT MIN(created_at) >= %s FROM {DATABASE}.{OWNER_TABLE}",
                            (server_now,))
                if _one_value(cur):
                    names.append(DATABASE)
    finally:
        conn.close()
    _drop_databases(names, only_knoblabs=False)
    return [f"database {name} on the MariaDB at 127.0.0.1:3306 (now dropped)" for name in names]


@pytest.hookimpl(trylast=True)  # after xdist has stopped its workers
def pytest_sessionfinish(session: pytest.Session) -> None:
    """A test run leaves nothing behind: what it did leave fails the session, named."""
    before = session.config.stash.get(_BEFORE, None)
    if before is None:
        return
    left = _temp_left(before["temp"]) + _databases_left(session.config.stash[_SESSION],
                                                        before["server_now"])
    if left:
        session.config.stash[_LEFT] = left
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    for what in config.stash.get(_LEFT, []):
        terminalreporter.write_line(f"LEFT BEHIND by this test run: {what}", red=True,
                                    bold=True)
