"""[dataset] dump: a mariadb-dump file loaded once into a template, on real servers.

The dump is written here in mariadb-dump's own shapes (executable comments, DELIMITER ;;,
views made in two steps), with a view, a trigger, a procedure, a function and an event whose
DEFINERs do not exist on the sandbox. A dump is untrusted: what it may not do (client commands,
server settings, files, plugins, accounts, the server's own databases) is refused in one line
naming its line, and nothing of it happens.
"""

from __future__ import annotations

import gzip
import json
import lzma
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pymysql
import pytest
import zstandard

from knoblab.datasets import dump as dump_module
from knoblab.errors import UserError
from knoblab.server.binary import ServerBinary
from knoblab.server.sandbox import Sandbox, base_template, derived_template
from knoblab.server.target import Tampered
from knoblab.spec import parse_spec
from knoblab.workloads.script import ScriptWorkload
from tests.fakes import SERVER_WIDE, query

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

DELIMITER ;;
CREATE DEFINER=`reporter`@`localhost` FUNCTION `doubled`(x INT) RETURNS int(11)
    DETERMINISTIC
RETURN x * 2 ;;
DELIMITER ;

DELIMITER ;;
/*!50106 CREATE*/ /*!50117 DEFINER=`scheduler`@`localhost`*/ /*!50106 EVENT `nightly` ON \
SCHEDULE EVERY 1 DAY STARTS '2025-01-01 00:00:00' ON COMPLETION NOT PRESERVE DISABLE DO \
UPDATE items SET price = price */ ;;
DELIMITER ;

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
    return list(query(server, sql, database))


def _build(binary: ServerBinary, home: Path, work: ScriptWorkload,
           progress: list[tuple[int, int]]) -> Path:
    data = work.dataset({})
    return derived_template(binary, data.key,
                            lambda server: data.build(server,
                                                      lambda d, t: progress.append((d, t))),
                            home, data.estimated_bytes())


@pytest.mark.parametrize("name", ["shop.sql", "shop.sql.gz", "shop.sql.zst"])
def test_a_dump_loads_with_its_routines_triggers_views_and_events(
        binary: ServerBinary, knoblab_home: Path, tmp_path: Path, name: str):
    dump = _write(tmp_path, name, WITH_DATABASE)
    work = _workload(dump)
    progress: list[tuple[int, int]] = []
    template = _build(binary, knoblab_home, work, progress)

    # The progress counts bytes of the dump file, to its end.
    assert progress and progress[-1] == (dump.stat().st_size, dump.stat().st_size)
    label = work.dataset({}).label()
    assert "'shopkeeper'@'%'" in label and "'reporter'@'localhost'" in label, label
    assert "made knoblab's data account (knoblab_data, all privileges on shop)" in label, label
    with Sandbox(binary, template, {}, home=knoblab_home) as server:
        # The foreign DEFINERs became the data account, which holds all privileges on shop:
        # the procedure and the trigger, the view and the function run as it.
        _rows(server, "CALL raise_prices(10)")
        assert _rows(server, "SELECT price FROM items ORDER BY id") == [(11,), (22,), (33,),
                                                                       (44,)]
        assert _rows(server, "SELECT COUNT(*) FROM audit") == [(4,)]
        assert _rows(server, "SELECT id FROM expensive ORDER BY id") == [(2,), (3,), (4,)]
        assert _rows(server, "SELECT doubled(21)") == [(42,)]
        definers = _rows(server, "SELECT DEFINER FROM information_schema.VIEWS WHERE "
                                 "TABLE_SCHEMA = 'shop' UNION SELECT DEFINER FROM "
                                 "information_schema.ROUTINES WHERE ROUTINE_SCHEMA = 'shop' "
                                 "UNION SELECT DEFINER FROM information_schema.TRIGGERS UNION "
                                 "SELECT DEFINER FROM information_schema.EVENTS")
        assert definers == [("knoblab_data@localhost",)]
        assert _rows(server, "SELECT COUNT(*) FROM information_schema.EVENTS") == [(1,)]
        # No account was made for them; the data account holds nothing beyond shop.
        assert _rows(server, "SELECT User FROM mysql.global_priv WHERE User IN "
                             "('shopkeeper', 'reporter', 'scheduler')") == []
        assert _rows(server, "SHOW GRANTS FOR knoblab_data@localhost") == [
            ("GRANT USAGE ON *.* TO `knoblab_data`@`localhost`",),
            ("GRANT ALL PRIVILEGES ON `shop`.* TO `knoblab_data`@`localhost`",)]


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
    dump = _write(tmp_path, "plain.sql", WITHOUT_DATABASE)
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
    assert f"the dump {dump} failed at line {bad + 1} (INSERT INTO `items` VALUES (5,50),(6 " \
        "60)): ERROR 1064 (42000)" in said, said
    assert "\n" not in said
    root = knoblab_home / "templates" / binary.slug
    assert not list(root.glob(f"{work.dataset({}).key}*"))


def test_a_dump_that_changes_root_is_refused_at_its_line(binary: ServerBinary,
                                                          knoblab_home: Path, tmp_path: Path):
    # As a dump of the mysql database (--all-databases) does: root gets the source's password.
    text = WITH_DATABASE.replace("-- Dump completed",
                                 "ALTER USER root@localhost IDENTIFIED BY 'elsewhere';")
    dump = _write(tmp_path, "root.sql", text)
    work = _workload(dump)
    line = text.splitlines().index("ALTER USER root@localhost IDENTIFIED BY 'elsewhere';") + 1
    with pytest.raises(UserError, match=rf"failed at line {line} \(ALTER USER root@localhost "
                                        r"IDENTIFIED BY 'elsewhere'\): ERROR 1227 .*CREATE "
                                        r"USER.*no server settings, files, plugins or "
                                        "accounts"):
        _build(binary, knoblab_home, work, [])
    assert not list((knoblab_home / "templates" / binary.slug).glob(f"{work.dataset({}).key}*"))


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
    with pytest.raises(UserError, match=r"cannot be read to its end: truncated \(Compressed "
                                        "file ended"):
        _workload(whole)  # its head reaches the cut
    # A head that ends before the cut: found while it loads.
    monkeypatch.setattr(dump_module, "HEAD_BYTES", 1000)
    work = _workload(whole)
    with pytest.raises(UserError, match=r"cannot be read to its end: truncated"):
        _build(binary, knoblab_home, work, [])
    assert not list((knoblab_home / "templates" / binary.slug).glob(f"{work.dataset({}).key}*"))


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
    first = _workload(dump).dataset({}).key
    described = _workload(dump).describe()
    assert _workload(dump).dataset({}).key == first
    _write(tmp_path, "shop.sql", WITH_DATABASE.replace("(4,40)", "(4,41)"))
    assert _workload(dump).dataset({}).key != first
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
        assert isinstance(dump.data, dump_module.Dump)
        assert dump.data.text_bytes() == len(text.encode())
        assert dump.dataset({}).estimated_bytes() == int(len(text.encode()) * 2.5)
    # A file larger than its text (a tiny one: the header weighs more) is taken at its word.
    tiny = _workload(_write(tmp_path, "tiny.sql.gz", "USE shop;\n"), database="shop")
    assert isinstance(tiny.data, dump_module.Dump) and tiny.data.text_bytes() == len("USE shop;\n")
    # A .zst written from a pipe does not say: a generous ratio stands in.
    streamed = tmp_path / "piped.sql.zst"
    with open(streamed, "wb") as out, zstandard.ZstdCompressor().stream_writer(out) as writer:
        writer.write(text.encode())
    dump = _workload(streamed)
    assert isinstance(dump.data, dump_module.Dump)
    assert dump.data.text_bytes() == streamed.stat().st_size * 8


def test_a_running_server_refuses_a_dump(tmp_path: Path):
    work = _workload(_write(tmp_path, "shop.sql", WITH_DATABASE))
    with pytest.raises(UserError, match="sandbox servers only"):
        work.dataset({}).check_running_server("the server at /run/mysqld.sock")


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
    assert "('reporter'@'localhost', 'scheduler'@'localhost', 'shopkeeper'@'%') were made " \
        "knoblab's data account" in " ".join((first.stdout + first.stderr).split())
    key = _workload(dump).dataset({}).key
    templates = list((knoblab_home / "templates" / binary.slug).glob(f"{key}*"))
    assert len(templates) == 1
    ready = (templates[0] / ".ready").stat().st_mtime_ns

    again = tmp_path / "again.toml"
    again.write_text(SPEC.format(dump=dump.name, database=""))
    second = _knoblab(knoblab_home, tmp_path, again)
    assert second.returncode == 0, second.stderr
    assert list((knoblab_home / "templates" / binary.slug).glob(f"{key}*")) == templates
    assert (templates[0] / ".ready").stat().st_mtime_ns == ready
    assert "data account" not in second.stdout + second.stderr

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
    assert f"the dump {dump} failed at line {bad + 1} (INSERT INTO `items` VALUES (5,50),(6 " \
        "60)): ERROR 1064 (42000)" in said, said
    key = _workload(dump).dataset({}).key
    assert not list((knoblab_home / "templates" / binary.slug).glob(f"{key}*"))
    assert not list(knoblab_home.glob("sandboxes/*"))


def test_a_dump_the_disk_cannot_hold_is_refused_before_it_is_loaded(tmpfs, tmp_path: Path):
    home = tmpfs(400)
    dump = _write(tmp_path, "big.sql", WITH_DATABASE)
    with open(dump, "r+b") as sparse:  # 1 GiB of text, taking no room on the disk
        sparse.truncate(1 << 30)
    spec = tmp_path / "big.toml"
    spec.write_text(SPEC.format(dump=dump.name, database=""))
    said = _error(_knoblab(home, tmp_path, spec))
    assert "needs 2.7G on the disk of" in said and "K free" in said, said
    assert not list(home.glob("templates/*/dump-*")) and not list(home.glob("sandboxes/*"))


def test_a_disk_filling_during_the_load_is_said_as_the_cause(tmpfs, tmp_path: Path):
    home = tmpfs(400)
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


# --------------------------------------------------------------------------- untrusted dumps


@pytest.fixture(scope="module")
def loader(binary: ServerBinary, knoblab_home: Path):
    """One sandbox that the dumps below are loaded into, each failing at its own line."""
    with Sandbox(binary, base_template(binary, knoblab_home) / "data", {},
                 home=knoblab_home) as server:
        yield server


@pytest.fixture
def outside():
    """A table on the MariaDB at 127.0.0.1:3306, the server a dump must never reach: its
    (database, table), dropped after."""
    conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="",
                           autocommit=True)
    database = f"knoblab_outside_{os.getpid()}"
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{database}`")
            cur.execute(f"CREATE TABLE IF NOT EXISTS `{database}`.seen (a TEXT)")
            yield database
            cur.execute(f"SELECT COUNT(*) FROM `{database}`.seen")
            assert cur.fetchone() == (0,), "a dump reached the server on 127.0.0.1:3306"
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
        conn.close()


# (what the dump says after `USE shop;` and a table t of its own, the line that must be
# refused, and what the refusal says after "failed at line N"). {marker}, {outside} and
# {elsewhere} are filled in by the test.
HOSTILE = {
    "shell": ("\\! touch {marker}", r": Unknown command '\\!'; a command of the mariadb client"),
    "system": ("system touch {marker}", r" \(system touch .*\): ERROR 1064 .*; a command of "
                                        "the mariadb client"),
    "reconnect": ("\\r {outside} 127.0.0.1", r": Unknown command '\\r'; a command of the "),
    "connect": ("connect {outside} 127.0.0.1", r" \(connect .*\): ERROR 1064 .*; a command of "),
    "source": ("source /etc/passwd", r" \(source /etc/passwd .*\): ERROR 1064 .*; a command "),
    "dot-source": ("\\. /etc/passwd", r": Unknown command '\\.'; a command of the mariadb "),
    "general-log": ("SET GLOBAL general_log_file = '{elsewhere}/general.log';\n"
                    "SET GLOBAL general_log = 1;",
                    r" \(SET GLOBAL general_log_file = .*\): ERROR 1227 .*SUPER"),
    "plugin": ("INSTALL SONAME 'ha_federatedx';", r" \(INSTALL SONAME 'ha_federatedx'\): "
                                                  r"ERROR 1142 .*mysql`\.`plugin`"),
    "federated": ("CREATE TABLE fed (a TEXT) ENGINE=FEDERATED "
                  "CONNECTION='mysql://root@127.0.0.1:3306/{outside}/seen';",
                  r" \(CREATE TABLE fed .*\): ERROR 1286 .*Unknown storage engine"),
    "local-infile": ("LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE t;",
                     r" \(LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE t\): ERROR 4166 "),
    "server-file": ("LOAD DATA INFILE '/etc/passwd' INTO TABLE t;",
                    r" \(LOAD DATA INFILE '/etc/passwd' INTO TABLE t\): ERROR 1045 .*no "
                    "server settings, files, plugins or accounts"),
    "outfile": ("SELECT 'x' INTO OUTFILE '{elsewhere}/out.txt';",
                r" \(SELECT 'x' INTO OUTFILE .*\): ERROR 1227 .*FILE"),
    "lock-root": ("ALTER USER root@localhost ACCOUNT LOCK;",
                  r" \(ALTER USER root@localhost ACCOUNT LOCK\): ERROR 1227 .*CREATE USER"),
    "user": ("CREATE USER app@localhost;", r" \(CREATE USER app@localhost\): ERROR 1227 "),
    "grant": ("GRANT ALL PRIVILEGES ON *.* TO knoblab_data@localhost;",
              r" \(GRANT ALL PRIVILEGES .*\): ERROR 104[45] "),
    "system-table": ("INSERT INTO mysql.plugin VALUES ('federatedx', 'ha_federatedx.so');",
                     r" \(INSERT INTO mysql.plugin .*\): ERROR 1142 "),
    "hidden-definer": ("CREATE /* kept */ DEFINER=`root`@`localhost` PROCEDURE p() SELECT 1;",
                       # the client leaves the comment out of what it sends and shows
                       r" \(CREATE DEFINER=`root`.*\): ERROR 1227 .*SET USER"),
}


@SERVER_WIDE  # its statements on the running server would land in a capture's slow log
@pytest.mark.parametrize("case", HOSTILE, ids=list(HOSTILE))
def test_what_a_dump_may_not_do_is_refused_at_its_line_and_does_not_happen(
        loader: Sandbox, outside: str, tmp_path: Path, case: str):
    marker, elsewhere = tmp_path / "marker", tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o777)
    elsewhere.chmod(0o777)  # the server could write here, were it let
    statement, said = HOSTILE[case]
    statement = statement.format(marker=marker, outside=outside, elsewhere=elsewhere)
    head = HEAD + DATABASES + "DROP TABLE IF EXISTS t;\nCREATE TABLE t (a TEXT);\n"
    # What follows runs only if the line above it was let through: on 127.0.0.1:3306 after
    # a reconnection there, in the sandbox otherwise.
    tail = f"INSERT INTO `{outside}`.seen VALUES ('reached');\nINSERT INTO t VALUES ('on');\n"
    dump = _write(tmp_path, f"{case}.sql", head + statement + "\n" + tail)
    work = _workload(dump)
    assert isinstance(work.data, dump_module.Dump)
    with pytest.raises(UserError) as caught:
        work.data.load(loader)
    message = str(caught.value)
    line = head.count("\n") + 1
    assert "\n" not in message
    assert re.match(rf"the dump {re.escape(str(dump))} failed at line {line}{said}", message), \
        message
    assert not marker.exists() and not list(elsewhere.iterdir())
    conn = loader.connect("shop")  # root still logs in
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM t")
            assert cur.fetchone() == (0,)
            cur.execute("SELECT @@general_log, LOCATE(%s, @@general_log_file)",
                        (str(elsewhere),))
            assert cur.fetchone() == (0, 0)
            cur.execute("SELECT COUNT(*) FROM mysql.plugin")
            assert cur.fetchone() == (0,)
            cur.execute("SELECT COUNT(*) FROM mysql.global_priv WHERE User IN ('app', 'root') "
                        "AND JSON_VALUE(Priv, '$.account_locked') = 1")
            assert cur.fetchone() == (0,)
            cur.execute("SHOW GRANTS FOR knoblab_data@localhost")
            assert all("*.*" not in grant or "USAGE" in grant for (grant,) in cur.fetchall())
    finally:
        conn.close()


def test_a_dump_naming_the_servers_own_database_is_refused_at_its_line(loader: Sandbox,
                                                                       tmp_path: Path):
    head = HEAD + DATABASES + "CREATE TABLE IF NOT EXISTS t (a TEXT);\n"
    dump = _write(tmp_path, "system.sql", head + "USE `mysql`;\nDELETE FROM user;\n")
    work = _workload(dump)
    assert isinstance(work.data, dump_module.Dump)
    with pytest.raises(UserError, match=rf"names the server's own database mysql at line "
                                        rf"{head.count(chr(10)) + 1} \(USE `mysql`;\), which "
                                        "knoblab does not load"):
        work.data.load(loader)
    # One that holds it from its head (--all-databases) is refused before anything loads.
    whole = _write(tmp_path, "all.sql", HEAD + "CREATE DATABASE `mysql`;\nUSE `mysql`;\n")
    with pytest.raises(UserError, match="holds the server's own database mysql"):
        _workload(whole)


def test_table_files_stay_in_the_sandbox_and_its_data_account_keeps_no_password(
        loader: Sandbox, tmp_path: Path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    elsewhere.chmod(0o777)
    body = (f"CREATE TABLE far_i (a INT) ENGINE=InnoDB DATA DIRECTORY='{elsewhere}';\n"
            f"CREATE TABLE far_m (a INT) ENGINE=MyISAM DATA DIRECTORY='{elsewhere}' "
            f"INDEX DIRECTORY='{elsewhere}';\n"
            "INSERT INTO far_i VALUES (1);\nINSERT INTO far_m VALUES (2);\n"
            # The one thing an account may change about itself: put back after the load.
            "SET PASSWORD = PASSWORD('elsewhere');\n")
    dump = _write(tmp_path, "far.sql", HEAD + DATABASES + body)
    work = _workload(dump)
    assert isinstance(work.data, dump_module.Dump)
    work.data.load(loader)
    assert not list(elsewhere.iterdir())
    assert (loader.datadir / "shop" / "far_i.ibd").is_file()
    assert (loader.datadir / "shop" / "far_m.MYD").is_file()
    assert not (loader.datadir / "shop" / "far_m.MYD").is_symlink()
    conn = pymysql.connect(unix_socket=str(loader.socket), user="knoblab_data", password="",
                           database="shop")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT (SELECT a FROM far_i), (SELECT a FROM far_m)")
            assert cur.fetchone() == (1, 2)
    finally:
        conn.close()


def _frames(*texts: bytes, checksum: bool = False) -> bytes:
    return b"".join(zstandard.ZstdCompressor(write_checksum=checksum).compress(t)
                    for t in texts)


TRUNCATED = _frames(WITH_DATABASE.encode() * 40)[:-100]
NOT_DUMPS = {
    "empty": (b"", "the file is empty; give a dump"),
    "empty-gzip": (gzip.compress(b""), r"the file is empty once decompressed \(gzip\)"),
    "random": (random.Random(7).randbytes(4096), r"the file is not SQL text \(it holds NUL "),
    "csv": (b"id,name,price\n1,apple,3\n", "the file is not an SQL dump: it begins with "
                                          "'id,name,price'"),
    "xz": (lzma.compress(WITH_DATABASE.encode()), "the file is xz-compressed, which knoblab "
                                                  "does not read"),
    "cut-zstd": (TRUNCATED, r"the file cannot be read to its end: truncated; make the dump "),
    "cut-zstd-head": (TRUNCATED[:40], "the file cannot be read to its end: truncated"),
    "zstd-and-junk": (_frames(WITH_DATABASE.encode()) + b"junk",
                      "the file cannot be read to its end: damaged: byte .* does not begin"),
    "cut-gzip": (gzip.compress(WITH_DATABASE.encode())[:-40],
                 r"the file cannot be read to its end: truncated \(Compressed file ended"),
}


@pytest.mark.parametrize("database", [None, "shop"], ids=["alone", "with-database"])
@pytest.mark.parametrize("case", NOT_DUMPS, ids=list(NOT_DUMPS))
def test_a_file_that_is_not_a_whole_dump_says_what_it_is(tmp_path: Path, case: str,
                                                         database: str | None):
    content, said = NOT_DUMPS[case]
    dump = tmp_path / f"{case}.sql"
    dump.write_bytes(content)
    with pytest.raises(UserError, match=said) as caught:
        _workload(dump, **({"database": database} if database else {}))
    assert "names no database" not in str(caught.value)


def test_whole_zstd_files_of_every_shape_are_read(tmp_path: Path):
    text = WITH_DATABASE.encode()
    skippable = (0x184D2A53).to_bytes(4, "little") + (5).to_bytes(4, "little") + b"12345"
    streamed = tmp_path / "streamed.sql.zst"  # no content size in its header
    with open(streamed, "wb") as out, zstandard.ZstdCompressor(write_checksum=True) \
            .stream_writer(out) as writer:
        writer.write(text * 200)
    shapes = {"frames": _frames(text[:500], text[500:], checksum=True),
              "skippable": skippable + _frames(text), "streamed": streamed.read_bytes()}
    if shutil.which("zstd"):
        made = subprocess.run(["zstd", "-q", "-T2", "-c"], input=text * 2000,
                              capture_output=True, check=True)
        shapes["zstd-command"] = made.stdout
    for name, content in shapes.items():
        dump = tmp_path / f"{name}.sql.zst"
        dump.write_bytes(content)
        work = _workload(dump)
        assert isinstance(work.data, dump_module.Dump) and work.data.named == "shop", name


def test_a_dump_edited_in_place_with_its_size_and_time_kept_is_a_new_template(tmp_path):
    # Its middle changed, outside the first and last MiB the key hashes; the size and the
    # modification time put back as they were: only the change time tells.
    path = tmp_path / "edited.sql"
    filler = "".join(f"-- line {i:07d}\n" for i in range(300_000))  # about 5 MB
    path.write_text("CREATE DATABASE shop;\nUSE shop;\n" + filler
                    + "CREATE TABLE t (i INT);\n")
    before = dump_module.Dump.from_spec({"dump": str(path)}, None)
    stat = path.stat()
    with open(path, "r+b") as raw:
        raw.seek(stat.st_size // 2)
        raw.write(b"9")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    after = dump_module.Dump.from_spec({"dump": str(path)}, None)
    assert (after.size, after.mtime_ns, after.edges) == (before.size, before.mtime_ns,
                                                           before.edges)
    assert after.key != before.key
