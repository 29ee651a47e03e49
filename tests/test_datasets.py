"""The Dataset contract, run over every kind [dataset] names (`knoblab.datasets.KINDS`) and the
data the workload kinds make of their own: a key that stays the same for the same data and
differs for other data (a swept variant included), a label, a size estimate, a description;
and, for the cheap ones, a build into a template on a real server."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from knoblab import datasets
from knoblab.connection import DATABASE
from knoblab.datasets import Dataset
from knoblab.datasets.empty import EmptyServer
from knoblab.errors import UserError
from knoblab.server.binary import ServerBinary
from knoblab.server.sandbox import Sandbox, derived_template
from knoblab.workloads.script import ScriptSetup
from knoblab.workloads.sysbench import SysbenchWorkload
from tests.fakes import FakeData

DUMP_TEXT = """\
-- MariaDB dump 10.19
CREATE DATABASE /*!32312 IF NOT EXISTS*/ `shelf` /*!40100 DEFAULT CHARACTER SET utf8mb4 */;
USE `shelf`;
CREATE TABLE `items` (`id` int NOT NULL, PRIMARY KEY (`id`)) ENGINE=InnoDB;
INSERT INTO `items` VALUES (1),(2),(3);
"""


def _dump(folder: Path, name: str, text: str) -> str:
    path = folder / name
    path.write_text(text)
    return str(path)


# Per registered kind: two [dataset] sections holding different data, the requested values
# that choose distinct variants of the first (none for data without parameters), and a table
# the built data holds, with its row count.
Example = tuple[dict[str, Any], dict[str, Any], list[dict[str, str]], tuple[str, str, int]]
EXAMPLES: dict[str, Callable[[Path], Example]] = {
    "scan-table": lambda folder: (
        {"rows": 1000}, {"rows": 1000, "engine": "Aria"},
        [{"rows": "1000"}, {"rows": "2000"}, {"engine": "InnoDB"}, {"slack_type": "CHAR(50)"}],
        (DATABASE, "dt2", 1000)),
    "dump": lambda folder: (
        {"dump": _dump(folder, "shelf.sql", DUMP_TEXT)},
        {"dump": _dump(folder, "copy.sql", DUMP_TEXT.split("USE `shelf`;\n")[1]),
         "database": "copy"},
        [],
        ("shelf", "items", 3)),
}


def test_every_registered_kind_has_an_example():
    assert set(EXAMPLES) == set(datasets.KINDS)


def _follows_the_contract(data: Dataset, again: Dataset, other: Dataset) -> None:
    assert isinstance(data.key, str) and data.key
    assert again.key == data.key  # the same data, read again: one template
    assert other.key != data.key
    assert data.label() and ", then more" in data.label(", then more")
    assert data.estimated_bytes() >= 0
    described = data.describe(None)
    assert described is None or json.dumps(described)
    assert json.dumps(data.pinned())
    assert data.workload_database is None or isinstance(data.workload_database, str)
    try:
        data.check_running_server("the server at /run/mysqld.sock")
    except UserError as refused:
        assert "\n" not in str(refused)
    # A requested value that is not one of its parameters (a server setting) changes nothing.
    assert data.varied({"read_buffer_size": "1M"}).key == data.key


@pytest.mark.parametrize("name", sorted(datasets.KINDS))
def test_a_registered_kind_follows_the_contract(name: str, tmp_path: Path):
    first, second, variants, _ = EXAMPLES[name](tmp_path)
    assert datasets.kind_of(first) == name and datasets.kind_of(second) == name
    data = datasets.read(first, tmp_path)
    assert type(data) is datasets.KINDS[name]
    _follows_the_contract(data, datasets.read(first, tmp_path), datasets.read(second, tmp_path))
    assert data.estimated_bytes() > 0
    described = data.describe(None)
    assert described is not None and described["kind"] == name
    keys = [data.varied(requested).key for requested in variants]
    assert len(set(keys)) == len(keys)  # one template per variant
    assert set(variants[0]) <= set(data.parameters) if variants else not data.parameters
    with pytest.raises(UserError, match="^not here$"):
        datasets.read(first, tmp_path, refused={name: "not here"})


MADE: dict[str, Callable[[], tuple[Dataset, Dataset, Dataset]]] = {
    "script setup": lambda: (ScriptSetup("CREATE TABLE t (a INT)"),
                             ScriptSetup("CREATE TABLE t (a INT)"),
                             ScriptSetup("CREATE TABLE t (a BIGINT)")),
    "sysbench tables": lambda: (SysbenchWorkload(tables=2).dataset({}),
                                SysbenchWorkload(tables=2, threads=3).dataset({"threads": "3"}),
                                SysbenchWorkload(tables=3).dataset({})),
    "empty server": lambda: (EmptyServer("replay"), EmptyServer("replay"), EmptyServer("other")),
    "fake": lambda: (FakeData(), FakeData(), ScriptSetup("")),
}


@pytest.mark.parametrize("name", sorted(MADE))
def test_data_a_workload_makes_follows_the_contract(name: str):
    _follows_the_contract(*MADE[name]())


def test_a_script_setup_over_a_dump_is_that_data_then_the_setup(tmp_path: Path):
    dump = datasets.read(EXAMPLES["dump"](tmp_path)[0], tmp_path)
    over = ScriptSetup("CREATE TABLE more (a INT)", dump)
    assert over.key.startswith(dump.key + "-setup-")
    assert ScriptSetup("", dump).key == dump.key
    assert over.label() == dump.label(", then the script's setup")
    assert over.workload_database == "shelf" and over.pinned() == dump.pinned()
    assert over.estimated_bytes() == dump.estimated_bytes()


def _rows(server: Sandbox, database: str, table: str) -> int:
    conn = server.connect(database)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM `{table}`")
            return int(cur.fetchone()[0])
    finally:
        conn.close()


@pytest.mark.server
@pytest.mark.parametrize("name", sorted(datasets.KINDS))
def test_a_registered_kind_builds_into_a_template(name: str, binary: ServerBinary,
                                                  knoblab_home: Path, tmp_path: Path):
    first, _, _, (database, table, rows) = EXAMPLES[name](tmp_path)
    data = datasets.read(first, tmp_path)
    progress: list[tuple[int, int]] = []
    template = derived_template(binary, data.key,
                                lambda server: data.build(server,
                                                          lambda d, t: progress.append((d, t))),
                                knoblab_home, data.estimated_bytes())
    described = data.describe(template)
    assert described is not None and isinstance(described["bytes"], int) and described["bytes"]
    assert data.workload_database == database
    assert data.files(template)  # what a cold cache evicts
    with Sandbox(binary, template, {}, home=knoblab_home) as server:
        assert data.database_on(server) == database
        assert _rows(server, database, table) == rows


class _Running:
    """A running server whose [server] database names knoblab's own there."""

    database = "knoblab_bench"


def test_data_in_knoblabs_own_database_is_in_the_running_servers(tmp_path: Path):
    scan = datasets.read(EXAMPLES["scan-table"](tmp_path)[0], tmp_path)
    dump = datasets.read(EXAMPLES["dump"](tmp_path)[0], tmp_path)
    assert scan.database_on(_Running()) == "knoblab_bench"  # type: ignore[arg-type]
    assert ScriptSetup("").database_on(_Running()) == "knoblab_bench"  # type: ignore[arg-type]
    assert dump.database_on(_Running()) == "shelf"  # type: ignore[arg-type]
    assert ScriptSetup("", dump).database_on(_Running()) == "shelf"  # type: ignore[arg-type]
    assert EmptyServer("replay").database_on(_Running()) is None  # type: ignore[arg-type]


@pytest.mark.server
def test_data_a_workload_makes_builds_into_a_template(binary: ServerBinary, knoblab_home: Path):
    setup = ScriptSetup("CREATE TABLE made (a INT); INSERT INTO made VALUES (1), (2)")
    for data in (setup, EmptyServer("contract")):
        template = derived_template(binary, data.key, data.build, knoblab_home)
        assert data.describe(template) is None
    template = derived_template(binary, setup.key, setup.build, knoblab_home)
    with Sandbox(binary, template, {}, home=knoblab_home) as server:
        assert _rows(server, DATABASE, "made") == 2
