"""[dataset] dump: a mariadb-dump file loaded once into a template, on real servers.

The dump is written here in mariadb-dump's own shapes (executable comments, DELIMITER ;;,
views made in two steps), with a view, a trigger and a procedure whose DEFINERs do not
exist on the sandbox, and one of the dump's own users.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard

from knoblab.errors import UserError
from knoblab.server.binary import ServerBinary
from knoblab.server.sandbox import Sandbox, derived_template
from knoblab.server.target import Tampered
from knoblab.spec import parse_spec
from knoblab.workloads import dump as dump_module
from knoblab.workloads.script import ScriptWorkload
from tests.test_disk import small_disk  # noqa: F401 (a fixture)

pytestmark = pytest.mark.server

HEAD = """\
-- MariaDB dump 10.19  Distrib 10.11.6-MariaDB, for debian-linux-gnu (x86_64)
--
-- Host: localhost    Database: shop
-- ------------------------------------------------------
/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */;
/*!40101 SET NAMES utf8mb4 */;
/*!40014 SET @OLD_UNIQUE_CHECKS=@@UNIQUE_CHECKS, UNIQUE_CHECKS=0 */;
/*!40111 SET @OLD_SQL_NOTES=@@SQL_NOTES, SQL_NOTES=0 */;

"""
DATABASES = """\
--
-- Current Database: `shop`
--

CREATE DATABASE /*!32312 IF NOT EXISTS*/ `shop` /*!40100 DEFAULT CHARACTER SET utf8mb4 */;

USE `shop`;
"""
BODY = """\

--
-- Table structure for table `items`
--

DROP TABLE IF EXISTS `items`;
CREATE TABLE `items` (
  `id` int(11) NOT NULL,
  `price` int(11) NOT NULL,
  PRIMARY KEY (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

LOCK TABLES `items` WRITE;
/*!40000 ALTER TABLE `items` DISABLE KEYS */;
INSERT INTO `items` VALUES (1,10),(2,20),(3,30),(4,40);
/*!40000 ALTER TABLE `items` ENABLE KEYS */;
UNLOCK TABLES;

DROP TABLE IF EXISTS `audit`;
CREATE TABLE `audit` (
  `id` int(11) NOT NULL AUTO_INCREMENT,
  `item` int(11) NOT NULL,
  PRIMARY KEY (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

/*!50003 SET @saved_sql_mode       = @@sql_mode */ ;
DELIMITER ;;
/*!50003 CREATE*/ /*!50017 DEFINER=`shopkeeper`@`%`*/ /*!50003 TRIGGER `items_audit` AFTER \
UPDATE ON `items` FOR EACH ROW INSERT INTO audit (item) VALUES (NEW.id) */;;
DELIMITER ;
/*!50003 SET sql_mode              = @saved_sql_mode */ ;

DELIMITER ;;
CREATE DEFINER=`shopkeeper`@`%` PROCEDURE `raise_prices`(IN pct INT)
    SQL SECURITY DEFINER
BEGIN
  UPDATE items SET price = price + price * pct DIV 100;
END ;;
DELIMITER ;

/*!50001 DROP VIEW IF EXISTS `expensive`*/;
/*!50001 CREATE ALGORITHM=UNDEFINED */
/*!50013 DEFINER=`reporter`@`localhost` SQL SECURITY DEFINER */
/*!50001 VIEW `expensive` AS select `items`.`id` AS `id` from `items` \
where `items`.`price` > 15 */;

CREATE USER IF NOT EXISTS `app`@`localhost`;
GRANT SELECT ON `shop`.* TO `app`@`localhost`;

/*!40014 SET UNIQUE_CHECKS=@OLD_UNIQUE_CHECKS */;
-- Dump completed
"""
WITH_DATABASE = HEAD + DATABASES + BODY  # as mariadb-dump --databases shop writes it
WITHOUT_DATABASE = HEAD + BODY  # as mariadb-dump shop writes it

SPEC = """\
name = "dump"

[dataset]
dump = "{dump}"
{database}

[workload]
kind = "script"
body = "CALL raise_prices(10); SELECT COUNT(*) FROM expensive"
iterations = 3
repetitions = 2

[sweep]
sort_buffer_size = ["256K", "1M"]
"""


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    data = text.encode()
    if name.endswith(".gz"):
        data = gzip.compress(data)
    elif name.endswith(".zst"):
        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return path


def _workload(dump: Path, **dataset: str) -> ScriptWorkload:
    spec = parse_spec({"dataset": {"dump": str(dump), **dataset},
                       "workload": {"kind": "script", "body": "SELECT 1"},
                       "sweep": {"sort_buffer_size": ["256K", "1M"]}})
    assert isinstance(spec.workload, ScriptWorkload)
    return spec.workload


def _rows(server: Sandbox, sql: str, database: str = "shop") -> list[tuple]:
    conn = server.connect(database)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return list(cur.fetchall())
    finally:
        conn.close()


def _build(binary: ServerBinary, home: Path, work: ScriptWorkload,
           progress: list[tuple[int, int]]) -> Path:
    return derived_template(binary, work.prepare_key(),
                            lambda server: work.build_data(server, {},
                                                           lambda d, t: progress.append((d, t))),
                            home, work.data_bytes({}))


@pytest.mark.parametrize("name", ["shop.sql", "shop.sql.gz", "shop.sql.zst"])
def test_a_dump_loads_with_its_users_routines_triggers_and_views(
        binary: ServerBinary, knoblab_home: Path, tmp_path: Path, name: str):
    dump = _write(tmp_path, name, WITH_DATABASE)
    work = _workload(dump)
    progress: list[tuple[int, int]] = []
    template = _build(binary, knoblab_home, work, progress)

    # The progress counts bytes of the dump file, to its end.
    assert progress and progress[-1] == (dump.stat().st_size, dump.stat().st_size)
    label = work.data_label({})
    assert "'shopkeeper'@'%'" in label and "'reporter'@'localhost'" in label, label
    with Sandbox(binary, template, {}, home=knoblab_home) as server:
        # The procedure and the trigger run as shopkeeper, the view as reporter: each
        # needs its account to exist with privileges on shop.
        _rows(server, "CALL raise_prices(10)")
        assert _rows(server, "SELECT price FROM items ORDER BY id") == [(11,), (22,), (33,),
                                                                       (44,)]
        assert _rows(server, "SELECT COUNT(*) FROM audit") == [(4,)]
        assert _rows(server, "SELECT id FROM expensive ORDER BY id") == [(2,), (3,), (4,)]
        users = _rows(server, "SELECT User, Host, JSON_VALUE(Priv, '$.account_locked') "
                              "FROM mysql.global_priv WHERE User IN ('app', 'shopkeeper', "
                              "'reporter') ORDER BY User")
        assert users == [("app", "localhost", None), ("reporter", "localhost", "1"),
                         ("shopkeeper", "%", "1")]


def test_a_dump_without_set_names_is_read_as_utf8(binary: ServerBinary, knoblab_home: Path,
                                                  tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch):
    # The client's own default follows the locale: under C (cron, a bare container) latin1.
    monkeypatch.setenv("LC_ALL", "C")
    monkeypatch.setenv("LANG", "C")
    text = WITH_DATABASE.replace("/*!40101 SET NAMES utf8mb4 */;\n", "").replace(
        "LOCK TABLES `items` WRITE;",
        "CREATE TABLE `words` (`w` varchar(20)) DEFAULT CHARSET=utf8mb4;\n"
        "INSERT INTO `words` VALUES ('Käse ✓');\nLOCK TABLES `items` WRITE;")
    template = _build(binary, knoblab_home, _workload(_write(tmp_path, "utf8.sql", text)), [])
    with Sandbox(binary, template, {}, home=knoblab_home) as server:
        assert _rows(server, "SELECT w, CHAR_LENGTH(w) FROM words") == [("Käse ✓", 6)]


def test_a_dump_without_a_database_loads_into_the_one_named(
        binary: ServerBinary, knoblab_home: Path, tmp_path: Path):
    dump = _write(tmp_path, "plain.sql", WITHOUT_DATABASE.replace("`shop`.*", "`store`.*"))
    with pytest.raises(UserError, match=r"names no database.*database = "):
        _workload(dump)
    work = _workload(dump, database="store")
    template = _build(binary, knoblab_home, work, [])
    with Sandbox(binary, template, {}, home=knoblab_home) as server:
        assert _rows(server, "SELECT COUNT(*) FROM items", "store") == [(4,)]
        assert _rows(server, "SELECT COUNT(*) FROM expensive", "store") == [(3,)]


def test_a_failing_statement_names_the_dump_line_and_leaves_no_template(
        binary: ServerBinary, knoblab_home: Path, tmp_path: Path):
    lines = WITH_DATABASE.splitlines()
    bad = lines.index("UNLOCK TABLES;")
    lines.insert(bad, "INSERT INTO `items` VALUES (5,50),(6 60);")
    dump = _write(tmp_path, "broken.sql.gz", "\n".join(lines) + "\n")
    work = _workload(dump)
    with pytest.raises(UserError) as caught:
        _build(binary, knoblab_home, work, [])
    said = str(caught.value)
    assert f"the dump {dump} failed at line {bad + 1}: ERROR 1064 (42000)" in said, said
    assert "\n" not in said
    root = knoblab_home / "templates" / binary.slug
    assert not list(root.glob(f"{work.prepare_key()}*"))


def test_a_dump_that_changes_root_says_so(binary: ServerBinary, knoblab_home: Path,
                                           tmp_path: Path):
    # As a dump of the mysql database (--all-databases) does: root gets the source's password.
    dump = _write(tmp_path, "root.sql", WITH_DATABASE.replace(
        "-- Dump completed", "ALTER USER root@localhost IDENTIFIED BY 'elsewhere';"))
    work = _workload(dump)
    with pytest.raises(UserError, match=r"changed root@localhost.*--all-databases"):
        _build(binary, knoblab_home, work, [])
    assert not list((knoblab_home / "templates" / binary.slug).glob(f"{work.prepare_key()}*"))


def test_a_database_the_dump_does_not_create_is_one_line(
        binary: ServerBinary, knoblab_home: Path, tmp_path: Path):
    work = _workload(_write(tmp_path, "named.sql", WITH_DATABASE), database="other")
    with pytest.raises(UserError, match=r"database = 'other': the dump .* does not create it; "
                                        r"it creates shop$"):
        _build(binary, knoblab_home, work, [])


def test_a_truncated_compressed_dump_is_one_line(binary: ServerBinary, knoblab_home: Path,
                                                 tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch):
    whole = _write(tmp_path, "cut.sql.gz", WITH_DATABASE)
    whole.write_bytes(whole.read_bytes()[:-40])  # its end (and the gzip trailer) lost
    with pytest.raises(UserError, match=r"cannot read it as a gzip dump: Compressed file"):
        _workload(whole)  # its head reaches the cut
    # A head that ends before the cut: found while it loads.
    monkeypatch.setattr(dump_module, "HEAD_BYTES", 1000)
    work = _workload(whole)
    with pytest.raises(UserError, match=r"cannot be read to its end"):
        _build(binary, knoblab_home, work, [])
    assert not list((knoblab_home / "templates" / binary.slug).glob(f"{work.prepare_key()}*"))


def test_a_measurement_that_drops_a_dump_table_is_noticed(
        binary: ServerBinary, knoblab_home: Path, tmp_path: Path):
    work = _workload(_write(tmp_path, "guarded.sql", WITH_DATABASE))
    template = _build(binary, knoblab_home, work, [])
    with Sandbox(binary, template, {}, home=knoblab_home) as server, \
            pytest.raises(Tampered, match=r"dropped or renamed shop\.audit"), server.watch():
        _rows(server, "DROP TABLE audit")


def test_dumps_are_refused_where_they_do_not_fit(tmp_path: Path):
    dump = _write(tmp_path, "shop.sql", WITH_DATABASE)
    for workload, sweep, said in (
            ({"kind": "sysbench"}, {"sort_buffer_size": ["256K", "1M"]}, "sysbench prepares"),
            ({"sql": "SELECT 1"}, {"rows": [10, 100]}, "rows: a parameter of the built-in"),
            ({"sql": "SELECT 1"}, {"engine": ["MyISAM", "Aria"]}, "the data is the dump's")):
        with pytest.raises(UserError, match=said):
            parse_spec({"dataset": {"dump": str(dump)}, "workload": workload, "sweep": sweep})
    with pytest.raises(UserError, match="server's own database"):
        _workload(dump, database="mysql")
    for missing in (tmp_path / "missing.sql", "nul\0.sql", tmp_path):
        with pytest.raises(UserError, match="cannot read|not a file"):
            _workload(missing)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="rows"):
        _workload(dump, rows=10)  # type: ignore[arg-type]


def test_the_key_follows_the_dump_file(tmp_path: Path):
    dump = _write(tmp_path, "shop.sql", WITH_DATABASE)
    first = _workload(dump).prepare_key()
    described = _workload(dump).describe()
    assert _workload(dump).prepare_key() == first
    _write(tmp_path, "shop.sql", WITH_DATABASE.replace("(4,40)", "(4,41)"))
    assert _workload(dump).prepare_key() != first
    # The run's description changes with it: a run is not resumed over an edited dump.
    assert _workload(dump).describe() != described


@pytest.mark.parametrize("databases", [True, False])
def test_a_dump_made_by_mariadb_dump_loads(binary: ServerBinary, knoblab_home: Path,
                                           tmp_path: Path, databases: bool):
    work = _workload(_write(tmp_path, "source.sql", WITH_DATABASE))
    source = _build(binary, knoblab_home, work, [])
    dumper = shutil.which("mariadb-dump") or shutil.which("mysqldump")
    if dumper is None:
        pytest.skip("needs mariadb-dump")
    dump = tmp_path / "made.sql.gz"
    with Sandbox(binary, source, {}, home=knoblab_home) as server:
        made = subprocess.run(
            [dumper, "--no-defaults", f"--socket={server.socket}", "--user=root", "--routines",
             "--events", "--triggers", *(["--databases"] if databases else []), "shop"],
            capture_output=True, check=True, timeout=60)
    dump.write_bytes(gzip.compress(made.stdout))
    again = _workload(dump) if databases else _workload(dump, database="copy")
    template = _build(binary, knoblab_home, again, [])
    with Sandbox(binary, template, {}, home=knoblab_home) as server:
        where = "shop" if databases else "copy"
        _rows(server, "CALL raise_prices(60)", where)
        assert _rows(server, "SELECT COUNT(*) FROM audit", where) == [(4,)]
        assert _rows(server, "SELECT id FROM expensive ORDER BY id", where) == [(1,), (2,),
                                                                               (3,), (4,)]


def test_the_text_size_is_read_from_the_compressed_file(tmp_path: Path):
    text = WITH_DATABASE * 50
    for name in ("size.sql", "size.sql.gz", "size.sql.zst"):
        dump = _workload(_write(tmp_path, name, text))
        assert dump.dump is not None and dump.dump.text_bytes() == len(text.encode())
        assert dump.data_bytes({}) == int(len(text.encode()) * 2.5)
    # A file larger than its text (a tiny one: the header weighs more) is taken at its word.
    tiny = _workload(_write(tmp_path, "tiny.sql.gz", "USE shop;\n"), database="shop")
    assert tiny.dump is not None and tiny.dump.text_bytes() == len("USE shop;\n")
    # A .zst written from a pipe does not say: a generous ratio stands in.
    streamed = tmp_path / "piped.sql.zst"
    with open(streamed, "wb") as out, zstandard.ZstdCompressor().stream_writer(out) as writer:
        writer.write(text.encode())
    dump = _workload(streamed)
    assert dump.dump is not None and dump.dump.text_bytes() == streamed.stat().st_size * 8


def test_a_running_server_refuses_a_dump(tmp_path: Path):
    work = _workload(_write(tmp_path, "shop.sql", WITH_DATABASE))
    with pytest.raises(UserError, match="sandbox servers only"):
        work.check_running_server("the server at /run/mysqld.sock", None)


# --------------------------------------------------------------------------- the command


def _error(out: subprocess.CompletedProcess[str]) -> str:
    """The one line knoblab's refusal is (beside warnings and the progress bar)."""
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    said = [line for line in out.stderr.splitlines() if line.startswith("knoblab: ")]
    assert len(said) == 1, out.stderr
    return said[0]


def _knoblab(home: Path, tmp_path: Path, spec: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KNOBLAB_STORE"}
    env["KNOBLAB_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "knoblab.cli", "--store", f"sqlite:///{tmp_path / 's.sqlite'}",
         "run", str(spec), "--out", str(tmp_path / f"out-{spec.stem}")],
        env=env, capture_output=True, text=True, timeout=600, check=False)


def test_a_script_runs_over_a_dump_end_to_end_and_the_dump_loads_once(
        knoblab_home: Path, tmp_path: Path, binary: ServerBinary):
    dump = _write(tmp_path, "e2e.sql.zst", WITH_DATABASE)
    spec = tmp_path / "dump.toml"
    spec.write_text(SPEC.format(dump=dump.name, database=""))
    first = _knoblab(knoblab_home, tmp_path, spec)
    assert first.returncode == 0, first.stderr
    assert "created 'reporter'@'localhost', 'shopkeeper'@'%'" in first.stdout + first.stderr
    key = _workload(dump).prepare_key()
    templates = list((knoblab_home / "templates" / binary.slug).glob(f"{key}*"))
    assert len(templates) == 1
    ready = (templates[0] / ".ready").stat().st_mtime_ns

    again = tmp_path / "again.toml"
    again.write_text(SPEC.format(dump=dump.name, database=""))
    second = _knoblab(knoblab_home, tmp_path, again)
    assert second.returncode == 0, second.stderr
    assert list((knoblab_home / "templates" / binary.slug).glob(f"{key}*")) == templates
    assert (templates[0] / ".ready").stat().st_mtime_ns == ready
    assert "created" not in second.stdout + second.stderr

    result = json.loads((tmp_path / "out-dump" / "result.json").read_text())
    assert result["dataset"]["kind"] == "dump"
    assert result["dataset"]["database"] == "shop"
    assert [(p["n"], p["failed"]) for p in result["points"]] == [(2, 0), (2, 0)]


def test_a_query_is_timed_over_a_dump_with_a_cold_cache(knoblab_home: Path, tmp_path: Path):
    _write(tmp_path, "query.sql.gz", WITH_DATABASE)
    spec = tmp_path / "query.toml"
    spec.write_text(SPEC.format(dump="query.sql.gz", database="").replace(
        'kind = "script"\nbody = "CALL raise_prices(10); SELECT COUNT(*) FROM expensive"\n'
        'iterations = 3', 'sql = "SELECT COUNT(*) FROM expensive"\ncache = "cold"'))
    out = _knoblab(knoblab_home, tmp_path, spec)
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "out-query" / "result.json").read_text())
    assert result["dataset"]["kind"] == "dump" and result["workload"]["cache"] == "cold"
    assert [(p["n"], p["failed"]) for p in result["points"]] == [(2, 0), (2, 0)]


def test_a_missing_database_is_one_line(knoblab_home: Path, tmp_path: Path):
    _write(tmp_path, "nodb.sql", WITHOUT_DATABASE)
    spec = tmp_path / "nodb.toml"
    spec.write_text(SPEC.format(dump="nodb.sql", database=""))
    assert "names no database" in _error(_knoblab(knoblab_home, tmp_path, spec))


def test_a_syntax_error_is_one_line_with_exit_2_and_no_template(
        knoblab_home: Path, tmp_path: Path, binary: ServerBinary):
    lines = WITH_DATABASE.splitlines()
    bad = lines.index("UNLOCK TABLES;")
    lines.insert(bad, "INSERT INTO `items` VALUES (5,50),(6 60);")
    dump = _write(tmp_path, "bad.sql", "\n".join(lines) + "\n")
    spec = tmp_path / "bad.toml"
    spec.write_text(SPEC.format(dump=dump.name, database=""))
    said = _error(_knoblab(knoblab_home, tmp_path, spec))
    assert f"the dump {dump} failed at line {bad + 1}: ERROR 1064 (42000)" in said, said
    key = _workload(dump).prepare_key()
    assert not list((knoblab_home / "templates" / binary.slug).glob(f"{key}*"))
    assert not list(knoblab_home.glob("sandboxes/*"))


def test_a_dump_the_disk_cannot_hold_is_refused_before_it_is_loaded(small_disk,  # noqa: F811
                                                                     tmp_path: Path):
    home = small_disk(400)
    dump = _write(tmp_path, "big.sql", WITH_DATABASE)
    with open(dump, "r+b") as sparse:  # 1 GiB of text, taking no room on the disk
        sparse.truncate(1 << 30)
    spec = tmp_path / "big.toml"
    spec.write_text(SPEC.format(dump=dump.name, database=""))
    said = _error(_knoblab(home, tmp_path, spec))
    assert "needs 2.7G on the disk of" in said and "K free" in said, said
    assert not list(home.glob("templates/*/dump-*")) and not list(home.glob("sandboxes/*"))


def test_a_disk_filling_during_the_load_is_said_as_the_cause(small_disk,  # noqa: F811
                                                             tmp_path: Path):
    home = small_disk(400)
    # A few bytes of dump that make far more data than they weigh: the estimate passes.
    _write(tmp_path, "grows.sql", WITH_DATABASE.replace(
        "-- Dump completed",
        "CREATE TABLE filler (id INT PRIMARY KEY, pad CHAR(255)) ENGINE=InnoDB;\n"
        "INSERT INTO filler SELECT seq, REPEAT('x', 255) FROM seq_1_to_10000000;"))
    spec = tmp_path / "grows.toml"
    spec.write_text(SPEC.format(dump="grows.sql", database=""))
    said = _error(_knoblab(home, tmp_path, spec))
    assert "filled up while the data dump-" in said, said
    assert not list(home.glob("templates/*/dump-*")) and not list(home.glob("sandboxes/*"))
