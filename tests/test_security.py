"""Security: no shell, no SQL spliced from input, private sandboxes, hostile names refused.

(a) and (b) read knoblab's own source (no server); (c) starts a real sandbox; (d) checks that
SQL or line breaks in a setting's name or value are refused before anything runs.
"""

from __future__ import annotations

import ast
import os
import re
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from knoblab.datasets.scan import ScanTable
from knoblab.errors import UserError
from knoblab.spec import SECTION_KEYS, parse_spec
from knoblab.workloads import KINDS
from knoblab.workloads.sysbench import SysbenchWorkload

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "knoblab"

WORKLOAD_KEYS = {name: set(kind.keys) for name, kind in KINDS.items()}


def _sources() -> list[tuple[str, ast.Module]]:
    """(path relative to the repository, syntax tree) of every module of the package."""
    return [(path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(), str(path)))
            for path in sorted(PACKAGE.rglob("*.py"))]


# --------------------------------------------------------------------------- (a) no shell

SHELL_FUNCTIONS = {("os", "system"), ("os", "popen"), ("subprocess", "getoutput"),
                   ("subprocess", "getstatusoutput"), ("os", "spawnlp"), ("os", "spawnvp")}


def _shell_uses(tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg == "shell" and not (isinstance(keyword.value, ast.Constant)
                                                   and keyword.value.value is False):
                    found.append(f"line {node.lineno}: shell={ast.unparse(keyword.value)}")
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                (node.value.id, node.attr) in SHELL_FUNCTIONS:
            found.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
        if isinstance(node, ast.ImportFrom) and node.module in ("os", "subprocess"):
            for alias in node.names:
                if (node.module, alias.name) in SHELL_FUNCTIONS:
                    found.append(f"line {node.lineno}: from {node.module} import {alias.name}")
    return found


def test_the_shell_check_finds_what_it_looks_for():
    planted = ast.parse("import os, subprocess\nfrom os import popen\nos.system('x')\n"
                        "subprocess.run('x', shell=True)\nsubprocess.run(['x'], shell=flag)\n"
                        "subprocess.run(['x'], shell=False)\n")
    assert len(_shell_uses(planted)) == 4


def test_no_shell_anywhere():
    found = {path: uses for path, tree in _sources() if (uses := _shell_uses(tree))}
    assert not found, f"commands must be argument lists run without a shell: {found}"
    # And as text, in case of getattr tricks or strings run elsewhere.
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        for needle in ("shell=True", "os.system(", "os.popen("):
            assert needle not in text, f"{path}: {needle}"


# --------------------------------------------------------------------------- (b) SQL splices

# Every expression interpolated into an f-string that is run as SQL, per module, and why it is
# safe. A new splice fails the test until it is added here, with its reason.
SPLICES: dict[str, dict[str, str]] = {
    "knoblab/server/settings.py": {
        "name": "a setting's name: set_global looks it up in catalog.knobs first",
        "marks": "the text '%s, %s, ...': the names themselves are bound parameters",
    },
    "knoblab/server/external.py": {
        "knob": "a setting's name: the catalog's own (self.catalog.knobs[name].name)",
        "own": "server.database: the constant 'knoblab', or [server] database, checked "
               "against [A-Za-z_][A-Za-z0-9_]{0,63} (server._database)",
        "OWNER_TABLE": "the constant 'knoblab_owner'",
        "table.replace('`', '``')": "table names read from information_schema, quoted",
    },
    "knoblab/server/dumping.py": {
        "marks": "the text '%s, %s, ...': the names and grantees are bound parameters",
        "db_marks": "the text '%s, %s, ...': the database names are bound parameters",
    },
    "knoblab/verifying.py": {
        "knob.name": "a setting's name: the catalog's own (catalog.knobs[name].name), looked "
                     "up before it is used",
        "marks": "the text '%s, %s, ...': the status names are bound parameters",
    },
    "knoblab/capturing.py": {
        "taken_from.table": "a log table's name: a constant of knoblab.server.query_log's "
                            "Source (slow_log, general_log)",
    },
    "knoblab/server/query_log.py": {
        "table": "a log table's name: a constant of the module's Source (slow_log, "
                 "general_log)",
        "where": "the module's own constant condition on the process list, no value in it",
        "name": "a slow-log setting's name: one of the module's own constants that the "
                "server's catalog has (_known)",
        "knob.name": "a setting's name: the catalog's own (catalog.knobs[name].name), for a "
                     "name among the module's constants",
        "marks": "the text '%s, %s, ...': the thread ids are bound parameters",
        "window": "a table name of the module's own prefix and the run's id, matched against "
                  "[0-9a-z]+ (tables) before it is used",
        "kept": "a table name of the module's own prefix and the run's id, matched against "
                "[0-9a-z]+ (tables) before it is used",
    },
    "knoblab/server/guard.py": {
        "name": "a global's name as SHOW GLOBAL VARIABLES gave it, matched against [a-z0-9_]+ "
                "(_NAME) before it is used",
    },
    "knoblab/datasets/scan.py": {
        "server.database": "knoblab's own database: the constant 'knoblab' on a sandbox, or "
                           "[server] database, checked against [A-Za-z_][A-Za-z0-9_]{0,63} "
                           "(server._database)",
        "self.table": "the dataclass default 'dt2'; no spec key sets it",
        "self.engine": "checked against ENGINES in ScanTable.__post_init__",
        "self.slack_type": "checked against SLACK_TYPES in ScanTable.__post_init__",
        "BLOCK": "an int constant", "BLOCK - 1": "an int constant",
        "first": "an int row count", "full - 1": "an int block count",
        "first + full * BLOCK": "an int row count", "rest": "an int row count",
    },
    "knoblab/workloads/query.py": {
        "name": "a session setting's name from the catalog (runner.loop._Start._part: "
                "catalog.knobs)",
    },
    "knoblab/datasets/dump.py": {
        "quoted(self.workload_database)": "a database name in backticks, its backticks "
                                          "doubled (dump.quoted)",
        "quoted(pattern)": "a database name the dump names, its GRANT wildcards escaped, in "
                           "backticks, its backticks doubled (dump.quoted)",
    },
    "knoblab/workloads/script.py": {
        "server.database": "knoblab's own database: the constant 'knoblab' on a sandbox, or "
                           "[server] database, checked against [A-Za-z_][A-Za-z0-9_]{0,63} "
                           "(server._database)",
        "quoted(database)": "knoblab's database or the data's (a dump's), in backticks, its "
                            "backticks doubled (dump.quoted)",
        "worker.thread_id": "an int: the server's CONNECTION_ID()",
    },
    "knoblab/workloads/sysbench.py": {
        "self.database": "checked against [A-Za-z0-9_]{1,64} in validate(), which prepare() "
                         "calls first; no spec key sets it",
    },
}
# SQL statements that are not literals and not f-strings: the workload's own SQL, which the
# user writes and knoblab runs as written (that is what is measured), and SQLAlchemy Core.
SQL_SOURCES: dict[str, set[str]] = {
    "knoblab/workloads/query.py": {"self.sql"},
    # A captured log's statements, as the server ran them; a database change as USE of the
    # name in backticks (dump.quoted), the clock as SET timestamp of a number the plan wrote.
    "knoblab/workloads/replay.py": {"text"},
    "knoblab/workloads/script.py": {
        "trim_comment_tail(self.setup)",
        "self.template.render(worker.connection, iteration, first_row + iteration)",
    },
}
SQLALCHEMY = re.compile(r"^(runs|points|trials|seconds|os_seconds|saved_settings|run_locks|"
                       r"studies|store_marker|"
                       r"sa\.select|"
                       r"query)\b")
EXECUTORS = {"execute", "executemany", "query", "callproc", "mogrify"}


def _sql_statements(path: str, tree: ast.Module) -> list[tuple[int, ast.expr]]:
    """(line, first argument) of every call that sends SQL (cursor.execute, conn.query...)."""
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in EXECUTORS and node.args:
            calls.append((node.lineno, node.args[0]))
    return calls


def _a_number(expr: ast.expr) -> bool:
    """int(...) or float(...): whatever went in, a number comes out."""
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and \
        expr.func.id in ("int", "float")


def _problems(path: str, tree: ast.Module) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Splices not in the allow-lists, and every f-string statement with its expressions."""
    problems, fstrings = [], []
    allowed = SPLICES.get(path, {})
    for line, sql in _sql_statements(path, tree):
        text = ast.unparse(sql)
        if isinstance(sql, ast.Constant):
            continue
        if isinstance(sql, ast.JoinedStr):
            values = [v.value for v in sql.values if isinstance(v, ast.FormattedValue)]
            spliced = [ast.unparse(v) for v in values]
            fstrings.append((line, spliced))
            problems += [f"{path}:{line}: {{{ast.unparse(v)}}} in {text}" for v in values
                         if ast.unparse(v) not in allowed and not _a_number(v)]
        elif isinstance(sql, ast.BinOp) or (isinstance(sql, ast.Call) and isinstance(
                sql.func, ast.Attribute) and sql.func.attr == "format"):
            problems.append(f"{path}:{line}: SQL built with +, % or .format: {text}")
        elif path.startswith("knoblab/store/") and SQLALCHEMY.match(text):
            continue
        elif isinstance(sql, ast.Call) and ast.unparse(sql.func) == "sa.text" and \
                len(sql.args) == 1 and isinstance(sql.args[0], ast.Constant):
            continue  # SQLAlchemy's text() of a literal: its values are bound parameters
        elif text not in SQL_SOURCES.get(path, set()):
            problems.append(f"{path}:{line}: SQL from {text}: not a known source")
    return problems, fstrings


def test_the_splice_check_finds_what_it_looks_for():
    planted = ast.parse("cur.execute(f'SELECT {user_input}')\ncur.execute('SET x = ' + v)\n"
                        "conn.query('SELECT {}'.format(v))\ncur.execute(sql)\n"
                        "cur.execute(f'USE {server.database}')\ncur.execute('SELECT %s', (v,))\n"
                        "cur.execute(f'KILL {int(v)}')\ncur.execute(f'KILL {intx(v)}')\n")
    problems, fstrings = _problems("knoblab/workloads/script.py", planted)
    assert len(problems) == 5, problems
    assert fstrings == [(1, ["user_input"]), (5, ["server.database"]), (7, ["int(v)"]),
                        (8, ["intx(v)"])]


def test_sql_only_splices_known_safe_names():
    problems, listed = [], {}
    for path, tree in _sources():
        found, fstrings = _problems(path, tree)
        problems += found
        if fstrings:
            listed[path] = fstrings
    assert listed, "no f-string SQL found at all: is the scanner still looking?"
    assert not problems, (
        "SQL with a spliced value that is not known to be safe; bind values as parameters "
        "(cur.execute(sql, (value,))) or, for a name, add it to SPLICES with its reason:\n"
        + "\n".join(problems))


def test_no_raw_sqlalchemy_text_from_variables():
    for path, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("sa.text", "text",
                                                                         "sqlalchemy.text"):
                assert node.args and isinstance(node.args[0], ast.Constant), \
                    f"{path}:{node.lineno}: {ast.unparse(node)}"


# The runtime half of the allow-list: what it calls safe is safe.

def test_catalog_names_are_plain_identifiers(catalog):
    odd = [name for name in catalog.knobs if not re.fullmatch(r"[a-z0-9_]+", name)]
    assert not odd


def test_points_carry_catalog_names_only(catalog):
    spec = parse_spec({
        "server": {"config": {"Key-Buffer-Size ": "16M"}},
        "dataset": {"rows": 1000}, "workload": {"sql": "SELECT 1"},
        "sweep": {"READ-BUFFER-SIZE": ["64K", "128K"], " tmp_table_size": ["1M", "16M"]},
        "tie": {"MAX_HEAP_TABLE_SIZE": "tmp-table-size"},
    })
    base, points, _ = spec.points(catalog)
    names = set(base) | {name for point in points for name in point.config}
    assert names == {"key_buffer_size", "read_buffer_size", "tmp_table_size",
                     "max_heap_table_size"}
    assert names <= set(catalog.knobs)
    steps = parse_spec({"dataset": {"rows": 1000}, "workload": {"sql": "SELECT 1"},
                        "step": [{"Sort-Buffer-Size": "1M"}, {"READ_BUFFER_SIZE": "1M"}]})
    _, points, _ = steps.points(catalog)
    assert {n for p in points for n in p.config} == {"sort_buffer_size", "read_buffer_size"}


def test_spliced_dataset_fields_are_checked():
    assert "table" not in SECTION_KEYS["dataset"]
    for field in ("engine", "slack_type"):
        with pytest.raises(UserError):
            ScanTable(rows=10, **{field: "MyISAM; DROP DATABASE mysql; --"})
    with pytest.raises(UserError):
        parse_spec({"dataset": {"rows": 10, "engine": "MyISAM`; DROP DATABASE mysql"},
                    "workload": {"sql": "SELECT 1"}, "sweep": {"read_buffer_size": [1, 2]}})


def test_sysbench_database_is_checked():
    assert all("database" not in keys for keys in WORKLOAD_KEYS.values())
    workload = SysbenchWorkload(database="sbtest`; DROP DATABASE mysql; --")
    with pytest.raises(UserError, match="database"):
        workload.validate()


# --------------------------------------------------------------------------- (c) sandbox


def _listening(pid: int) -> list[Any]:
    process = psutil.Process(pid)
    connections = getattr(process, "net_connections", None) or process.connections
    return [c for c in connections(kind="inet") if c.status == psutil.CONN_LISTEN]


@pytest.mark.server
def test_sandbox_is_private(binary, knoblab_home):
    from knoblab.server.sandbox import Sandbox, base_template

    template = base_template(binary, knoblab_home) / "data"
    with Sandbox(binary, template, {}, home=knoblab_home) as server:
        socket_dir = server.socket_dir
        assert socket_dir is not None and server.socket.parent == socket_dir
        info = socket_dir.stat()
        assert stat.S_IMODE(info.st_mode) == 0o700, oct(info.st_mode)
        assert info.st_uid == os.geteuid()

        conn = server.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW GLOBAL VARIABLES LIKE 'skip_networking'")
                assert cur.fetchall() == (("skip_networking", "ON"),)
        finally:
            conn.close()
        assert server.pid is not None
        assert not _listening(server.pid)

        # No group or other access into the sandbox, its datadir or its tmpdir; nothing in the
        # datadir writable by others; whatever is readable by others (files copied from the
        # template) sits behind a directory they cannot enter.
        for folder in (server.dir, server.datadir, server.dir / "tmp"):
            assert stat.S_IMODE(folder.stat().st_mode) & 0o077 == 0, (folder, oct(
                folder.stat().st_mode))
        writable, exposed = [], []
        for path in server.datadir.rglob("*"):
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                continue
            if mode & stat.S_IWOTH:
                writable.append(path)
            if mode & stat.S_IROTH:
                ancestors = [p for p in path.parents if p == server.dir or server.dir in
                             p.parents]
                if all(p.stat().st_mode & stat.S_IXOTH for p in ancestors):
                    exposed.append(path)
        assert not writable
        assert not exposed
        sandbox_dir = server.dir
    assert not socket_dir.exists()
    assert not sandbox_dir.exists()


@pytest.mark.server
def test_a_sandbox_keeps_table_files_client_files_and_plugins_to_itself(binary, knoblab_home,
                                                                         tmp_path):
    """Even as root: no table file outside the datadir (DATA / INDEX DIRECTORY), no client
    file read by the server (LOAD DATA LOCAL), no plugin but those built in."""
    import pymysql

    from knoblab.server.sandbox import Sandbox, base_template

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    elsewhere.chmod(0o777)
    with Sandbox(binary, base_template(binary, knoblab_home) / "data", {},
                 home=knoblab_home) as server:
        assert server.global_values(["have_symlink", "local_infile", "plugin_dir"]) == {
            "have_symlink": "DISABLED", "local_infile": "OFF",
            "plugin_dir": f"{server.plugins}/"}
        assert server.plugins.parent == server.dir and not list(server.plugins.iterdir())
        conn = server.connect(local_infile=True)
        try:
            with conn.cursor() as cur:
                cur.execute("CREATE DATABASE far")
                cur.execute(f"CREATE TABLE far.i (a INT) ENGINE=InnoDB "
                            f"DATA DIRECTORY='{elsewhere}'")
                cur.execute(f"CREATE TABLE far.m (a INT) ENGINE=MyISAM "
                            f"DATA DIRECTORY='{elsewhere}' INDEX DIRECTORY='{elsewhere}'")
                cur.execute("INSERT INTO far.m VALUES (1)")
                with pytest.raises(pymysql.MySQLError, match="ha_federatedx"):
                    cur.execute("INSTALL SONAME 'ha_federatedx'")
                with pytest.raises(pymysql.MySQLError) as refused:
                    cur.execute("LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE far.m")
                assert refused.value.args[0] in (1148, 4166), refused.value.args
                cur.execute("SELECT COUNT(*) FROM information_schema.PLUGINS WHERE "
                            "PLUGIN_LIBRARY IS NOT NULL")
                assert cur.fetchone() == (0,)
        finally:
            conn.close()
        assert not list(elsewhere.iterdir())
        assert (server.datadir / "far" / "i.ibd").is_file()
        assert (server.datadir / "far" / "m.MYD").is_file()
        assert not (server.datadir / "far" / "m.MYD").is_symlink()


@pytest.mark.server
def test_no_setting_undoes_what_confines_a_sandbox(binary, knoblab_home):
    """Settings that would loosen the sandbox, given to it anyway (a check bypassed, an old
    stored spec), lose to its own lines: they come after every setting."""
    import pymysql

    from knoblab.server.sandbox import Sandbox, base_template

    loosening = {"local_infile": "ON", "symbolic_links": "ON", "skip_grant_tables": "ON",
                 "allow_suspicious_udfs": "ON", "skip_networking": "OFF",
                 "secure_file_priv": "/"}
    with Sandbox(binary, base_template(binary, knoblab_home) / "data", loosening,
                 home=knoblab_home) as server:
        held = server.global_values(["local_infile", "have_symlink", "skip_grant_tables",
                                     "allow_suspicious_udfs", "skip_networking",
                                     "secure_file_priv"])
        assert held == {"local_infile": "OFF", "have_symlink": "DISABLED",
                        "skip_grant_tables": "OFF", "allow_suspicious_udfs": "OFF",
                        "skip_networking": "ON", "secure_file_priv": f"{server.files}/"}
        conn = server.connect(local_infile=True)
        try:
            with conn.cursor() as cur:
                cur.execute("CREATE DATABASE far")
                cur.execute("CREATE TABLE far.t (a TEXT)")
                with pytest.raises(pymysql.MySQLError) as refused:
                    cur.execute("LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE far.t")
                assert refused.value.args[0] in (1148, 4166), refused.value.args
        finally:
            conn.close()


LOOSENING_SPEC = """name = "loose"
[server]
binary = "mariadbd"
{config}
[dataset]
rows = 100
[workload]
sql = "SELECT 1"
repetitions = 1
{search}
"""


@pytest.mark.server
@pytest.mark.parametrize(("command", "config", "search"), [
    ("run", '[server.config]\nlocal_infile = "ON"', '[sweep]\nsort_buffer_size = ["256K", "1M"]'),
    ("run", "", '[sweep]\nlocal_infile = ["OFF", "ON"]'),
    ("tune", "", '[tune]\ntrials = 2\n[tune.knobs]\nlocal_infile = ["OFF", "ON"]'),
    ("tune", '[server.config]\nlocal_infile = "ON"',
     '[tune]\ntrials = 2\n[tune.knobs]\nsort_buffer_size = ["256K", "1M"]'),
    ("run", '[server.config]\nskip_grant_tables = "ON"',
     '[sweep]\nsort_buffer_size = ["256K", "1M"]'),
    ("run", '[server.config]\nallow_suspicious_udfs = "ON"',
     '[sweep]\nsort_buffer_size = ["256K", "1M"]'),
])
def test_a_spec_cannot_loosen_a_sandbox_in_any_section(env, tmp_path, command, config, search):
    spec = tmp_path / "spec.toml"
    spec.write_text(LOOSENING_SPEC.format(config=config, search=search))
    out = subprocess.run([sys.executable, "-m", "knoblab.cli", "--store",
                          f"sqlite:///{tmp_path / 's.sqlite'}", command, str(spec)],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    line = out.stderr.strip()
    assert len(line.splitlines()) == 1 and "a sandbox" in line and "remove it" in line, line
    assert "local_infile" in line or "skip_grant_tables" in line or \
        "allow_suspicious_udfs" in line


@pytest.mark.server
def test_a_locked_root_is_said_at_once_not_after_the_start_timeout(binary, knoblab_home,
                                                                   tmp_path):
    import time

    from knoblab.server.datadir import copy_datadir
    from knoblab.server.sandbox import Sandbox, ServerStartError, base_template, derived_template

    def lock_root(server: Sandbox) -> None:
        conn = server.connect()
        try:
            conn.query("ALTER USER root@localhost ACCOUNT LOCK")  # no FLUSH needed
        finally:
            conn.close()

    began = time.monotonic()
    with pytest.raises(UserError, match=r"refuses knoblab's login as root afterwards \(Access "
                                        r"denied, this account is locked\)"):
        derived_template(binary, "locked-root", lock_root, knoblab_home)
    data = tmp_path / "data"
    copy_datadir(base_template(binary, knoblab_home) / "data", data)
    with Sandbox(binary, data, {}, home=knoblab_home, copy=False) as server:
        lock_root(server)
    with pytest.raises(ServerStartError, match=r"refuses knoblab's login as root \(Access "
                                               r"denied, this account is locked\)"):
        Sandbox(binary, data, {}, home=knoblab_home).start()
    assert time.monotonic() - began < 60  # not the start's timeout of 120 s


@pytest.mark.server
def test_spec_cannot_open_the_sandbox_to_the_network(knoblab_home, catalog, tmp_path):
    spec = tmp_path / "open.toml"
    spec.write_text('[server.config]\nskip_networking = "OFF"\nport = 13399\n'
                    'bind_address = "127.0.0.1"\n[dataset]\nrows = 1000\n[workload]\n'
                    'sql = "SELECT COUNT(*) FROM dt2"\nrepetitions = 1\n[sweep]\n'
                    'read_buffer_size = ["64K", "128K"]\n')
    environ = {**os.environ, "KNOBLAB_HOME": str(knoblab_home),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                          os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, "-m", "knoblab.cli", "--store", f"sqlite:///{tmp_path / 's.sqlite'}",
         "run", str(spec)], capture_output=True, text=True, env=environ, cwd=tmp_path,
        timeout=600, check=False)
    assert "Traceback" not in result.stderr
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "skip_networking" in lines[0], result.stderr


@pytest.mark.server
def test_a_sandbox_found_listening_is_stopped_at_once(binary, knoblab_home, tmp_path):
    """Below the settings, which cannot undo skip-networking: whatever made it listen (here a
    library preloaded into the server that opens a port), a started sandbox with an inet
    listener is refused and stopped."""
    import shutil

    from knoblab.server.sandbox import Sandbox, base_template

    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.skip("needs a C compiler to build a library that listens")
    with socket.socket() as probe:  # a free port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    source = tmp_path / "listen.c"
    source.write_text(
        "#include <netinet/in.h>\n#include <sys/socket.h>\n#include <arpa/inet.h>\n"
        "__attribute__((constructor)) static void listen_now(void) {\n"
        "  int fd = socket(AF_INET, SOCK_STREAM, 0);\n"
        "  struct sockaddr_in a = {0};\n"
        f"  a.sin_family = AF_INET; a.sin_port = htons({port});\n"
        "  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);\n"
        "  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0) listen(fd, 1);\n}\n")
    library = tmp_path / "liblisten.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    server = Sandbox(binary.with_preload(str(library)),
                     base_template(binary, knoblab_home) / "data", {}, home=knoblab_home)
    with pytest.raises(UserError, match=f"listened on the network \\(127.0.0.1:{port}\\)"):
        server.start()
    assert server.process is None
    assert not server.dir.exists()
    with socket.socket() as client:
        assert client.connect_ex(("127.0.0.1", port)) != 0  # nothing answers there now


@pytest.mark.parametrize("name", ["wsrep_on", "wsrep_provider", "wsrep_cluster_address",
                                  "plugin_load_add"])
def test_settings_of_kinds_that_open_the_network_are_refused(name):
    from knoblab.safety import check_sandbox_owned

    with pytest.raises(UserError, match="can open network ports"):
        check_sandbox_owned([name])


# Settings that would move the sandbox out of its private folder or onto the network.
SANDBOX_OWNED = [("skip_networking", "OFF"), ("port", "13399"), ("bind_address", "0.0.0.0"),
                 ("socket", "/tmp/elsewhere.sock"), ("datadir", "/var/lib/mysql"),
                 ("pid_file", "/tmp/elsewhere.pid"), ("log_error", "/tmp/elsewhere.log"),
                 ("tmpdir", "/tmp")]


class _Quiet:
    def message(self, text: str) -> None: ...
    def dataset_progress(self, done: int, total: int) -> None: ...
    def decision(self, undecided: list[str], most_left: int, budget_left: float | None
                 ) -> None: ...
    def plan(self, total: int, done: int, unit: str) -> None: ...
    def trial(self, *args: object) -> None: ...
    def second(self, *args: object) -> None: ...


@pytest.mark.server
@pytest.mark.parametrize(("name", "value"), SANDBOX_OWNED, ids=[n for n, _ in SANDBOX_OWNED])
def test_settings_the_sandbox_owns_are_refused(name, value, catalog, knoblab_home, tmp_path):
    from knoblab.runner import prepare
    from knoblab.store import Store

    spec = parse_spec({"server": {"config": {name: value}}, "dataset": {"rows": 1000},
                       "workload": {"sql": "SELECT COUNT(*) FROM dt2", "repetitions": 1},
                       "sweep": {"read_buffer_size": ["64K", "128K"]}})
    store = Store(f"sqlite:///{tmp_path / 's.sqlite'}")
    with pytest.raises(UserError, match=name):
        prepare(spec, knoblab_home, _Quiet(), store)


# --------------------------------------------------------------------------- (d) hostile input

MINIMAL = {"dataset": {"rows": 1000}, "workload": {"sql": "SELECT 1"}}
HOSTILE_NAMES = [
    "sort_buffer_size = 1; DROP DATABASE mysql; --",
    "read_buffer_size`; DROP DATABASE mysql; --",
    "read_buffer_size\nSET GLOBAL general_log = ON",
    "read_buffer_size/**/",
    "@@global.read_buffer_size",
    "read_buffer_size = 1\n[mysqld]\nskip-grant-tables",
    "read_buffer_size\x00",
]


def _with_name(where: str, name: str) -> dict[str, Any]:
    data: dict[str, Any] = {**MINIMAL}
    if where == "sweep":
        data["sweep"] = {name: ["64K", "128K"]}
    elif where == "config":
        data["server"] = {"config": {name: "64K"}}
        data["sweep"] = {"sort_buffer_size": ["1M", "2M"]}
    elif where == "step":
        data["step"] = [{name: "64K"}]
    elif where == "tie-follower":
        data["sweep"] = {"tmp_table_size": ["1M", "16M"]}
        data["tie"] = {name: "tmp_table_size"}
    else:  # tie-leader
        data["sweep"] = {"tmp_table_size": ["1M", "16M"]}
        data["tie"] = {"max_heap_table_size": name}
    return data


@pytest.mark.parametrize("where", ["sweep", "config", "step", "tie-follower", "tie-leader"])
@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=range(len(HOSTILE_NAMES)))
def test_sql_in_a_setting_name_is_refused(catalog, where, name):
    with pytest.raises(UserError) as info:
        parse_spec(_with_name(where, name)).points(catalog)
    message = str(info.value)
    assert "\n" not in message and "\x00" not in message, message  # quoted, not raw


HOSTILE_VALUES = [
    ("read_buffer_size", "131072; DROP DATABASE mysql; --"),
    ("read_buffer_size", "131072\n[mysqld]\nskip-grant-tables"),
    ("long_query_time", "1; DROP DATABASE mysql"),
    ("low_priority_updates", "ON; DROP DATABASE mysql"),
    ("innodb_flush_method", "fsync'; DROP DATABASE mysql; --"),
    ("event_scheduler", "ON\nskip-networking=0"),
    ("optimizer_switch", "index_merge=on; DROP DATABASE mysql"),
    ("sql_mode", "ANSI'; DROP DATABASE mysql; --"),
    ("init_connect", "SELECT 1\n[mysqld]\nskip-grant-tables"),
    ("init_connect", "SELECT 1\rskip-grant-tables"),
    ("init_connect", "SELECT 1\x00"),
    ("character_set_server", "utf8mb4\nskip-networking=0"),
]


@pytest.mark.parametrize("where", ["sweep", "config", "step"])
@pytest.mark.parametrize(("name", "value"), HOSTILE_VALUES,
                         ids=[f"{n}-{i}" for i, (n, _) in enumerate(HOSTILE_VALUES)])
def test_sql_or_line_breaks_in_a_value_are_refused(catalog, where, name, value):
    assert name in catalog.knobs
    data: dict[str, Any] = {**MINIMAL}
    if where == "sweep":
        data["sweep"] = {name: [value, catalog.knobs[name].default or "x"]}
    elif where == "config":
        data["server"] = {"config": {name: value}}
        data["sweep"] = {"sort_buffer_size": ["1M", "2M"]}
    else:
        data["step"] = [{name: value}]
    with pytest.raises(UserError) as info:
        parse_spec(data).points(catalog)
    assert "\n" not in str(info.value)


def test_accepted_free_text_stays_on_one_line(catalog):
    # A text setting may hold SQL-looking text (init_connect is SQL): it is passed as a bound
    # parameter (SET GLOBAL x = %s) or as one my.cnf line, so it must never hold a line break.
    spec = parse_spec({**MINIMAL, "sweep": {"init_connect": ["SELECT 1; DROP TABLE t", "''"]}})
    _, points, _ = spec.points(catalog)
    for point in points:
        assert all("\n" not in v and "\r" not in v for v in point.config.values())
