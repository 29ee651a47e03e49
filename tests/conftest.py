"""Shared fixtures: one private knoblab home per test session, and the real server binary."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest
from hypothesis import settings

from knoblab.server.binary import ServerBinary, find_binary

# The suite's property tests draw the same examples on every run, so that a red run is one a
# change caused; HYPOTHESIS_PROFILE=explore draws new ones (run it to look for new failures).
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@pytest.fixture(scope="session")
def knoblab_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh $KNOBLAB_HOME for the whole session: templates are built once and shared."""
    home = tmp_path_factory.mktemp("knoblab-home")
    os.environ["KNOBLAB_HOME"] = str(home)
    return home


@pytest.fixture(scope="session")
def binary() -> ServerBinary:
    """The MariaDB (or MySQL) server binary from PATH; the tests need a real one."""
    return find_binary()


@pytest.fixture(scope="session")
def catalog(binary: ServerBinary, knoblab_home: Path):
    from knoblab.server.sandbox import catalog_for

    return catalog_for(binary, knoblab_home)


def drop_knoblabs_database_on_the_running_server() -> None:
    """The database a run on the MariaDB at 127.0.0.1:3306 made for its data (`knoblab`,
    marked as knoblab's), dropped; one of that name knoblab did not make is left alone."""
    from knoblab.connection import DATABASE
    from knoblab.server.external import OWNER_TABLE

    try:
        conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="",
                               connect_timeout=2, autocommit=True)
    except pymysql.MySQLError:
        return  # no running server here: no test made anything on it
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                        "AND TABLE_NAME = %s", (DATABASE, OWNER_TABLE))
            if cur.fetchone():
                cur.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
    finally:
        conn.close()


@pytest.fixture(scope="session", autouse=True)
def running_server_left_clean() -> Iterator[None]:
    """Runs on the running server (tests of external targets, faults, golden files, hostile
    workloads) build their data in its database `knoblab`: gone when the session ends, after
    failed tests too."""
    yield
    drop_knoblabs_database_on_the_running_server()
