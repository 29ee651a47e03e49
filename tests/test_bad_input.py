"""Bad input through the real CLI: exit code 2, one line on stderr, no traceback, no server left.

Every case runs the `knoblab` command with the session's KNOBLAB_HOME (the base template and
catalog are built once by the `catalog` fixture) and a private results store. The table's cases
are about checking arguments and specs: they call knoblab.cli.main in this process, with the
output captured at the file descriptors (a server's or a library's own writes are seen too),
which spares each a second of Python start-up. The cases marked `process=True`, and the runs
that fail below, start `python -m knoblab.cli` as a real process: its exit code, its streams,
its imports' warnings and the servers it leaves are those a user would see.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from knoblab.store import RunInfo, Store
from tests.fakes import main_here

GOOD_SWEEP = 'read_buffer_size = ["64K", "128K"]'


def _spec(*, top: str = "", server: str = "", dataset: str = "rows = 1000",
          workload: str = 'sql = "SELECT COUNT(*) FROM dt2"\nrepetitions = 1',
          sweep: str = GOOD_SWEEP, statistics: str = "") -> str:
    return (f"{top}\n[server]\n{server}\n[dataset]\n{dataset}\n[workload]\n{workload}\n"
            f"[sweep]\n{sweep}\n[statistics]\n{statistics}\n")


def _knoblab(args: list[str], env: dict[str, str], cwd: Path, *, store: bool = True,
             timeout: float = 300) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "knoblab.cli"]
    if store:
        command += ["--store", f"sqlite:///{cwd / 's.sqlite'}"]
    return subprocess.run(command + args, capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=timeout, check=False)


def knoblab_in_process(args: list[str], environ: dict[str, str], cwd: Path,
                       monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], *,
                       store: bool = True) -> subprocess.CompletedProcess[str]:
    """knoblab.cli.main(args) in this process, as _knoblab runs it: in `cwd`, with the
    environment `environ`; its exit code (returned, or raised by argparse) and its output."""
    if store:
        args = ["--store", f"sqlite:///{cwd / 's.sqlite'}", *args]
    for name in ("COLUMNS", "LINES", "KNOBLAB_STORE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(cwd)
    capfd.readouterr()  # only what the command writes
    code, exited = main_here(args)
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(args, code, out, err + exited)


def _servers_of(home: Path) -> list[str]:
    """Command lines of running mariadbd/mysqld processes that belong to this knoblab home."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if ("mariadbd" in text or "mysqld" in text) and str(home) in text:
            found.append(f"{cmdline.parent.name}: {text}")
    return found


def _no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stdout + result.stderr, result.stderr[-3000:]


# --------------------------------------------------------------------------- the table

# Specs of the other workload kinds (each valid but for the line a case changes).
SWEEP = '[sweep]\nread_buffer_size = ["64K", "128K"]\n'
SYSBENCH = ("[workload]\nkind = \"sysbench\"\nthreads = 2\ntables = 1\ntable_size = 100\n"
            "duration = 5\n")
SCRIPT = ("[workload]\nkind = \"script\"\nsetup = \"CREATE TABLE t (a INT)\"\n"
          "body = \"INSERT INTO t VALUES ({row})\"\niterations = 2\nrepetitions = 1\n")
STEPS = "[dataset]\nrows = 1000\n[workload]\nsql = \"SELECT COUNT(*) FROM dt2\"\n"
EXTERNAL = 'kind = "external"\nhost = "127.0.0.1"\nport = 3306'
TUNE = ("[dataset]\nrows = 1000\n[workload]\nsql = \"SELECT COUNT(*) FROM dt2\"\n"
        "[tune]\n{tune}\n[tune.knobs]\n{knobs}\n")


def _case(spec: str | bytes | None, args: list[str], fragments: list[str], *, id: str,
          prepare: Callable[[Path], None] | None = None, environ: dict[str, str] | None = None,
          process: bool = False, marks: Any = ()) -> Any:
    """One row: the spec ("{tmp}" is the case's directory), the arguments, the fragments the
    message must hold ("!text": must not hold), a function preparing files in the case's
    directory, environment changes, and whether the command runs as a process of its own."""
    return pytest.param(spec, args, fragments, prepare, environ or {}, process, id=id,
                        marks=marks)


def _non_executable(tmp: Path) -> None:
    fake = tmp / "mariadbd"
    fake.write_text("#!/bin/sh\necho 'mariadbd  Ver 10.11.19-MariaDB'\n")
    fake.chmod(0o644)


def _symlink_loop(tmp: Path) -> None:
    (tmp / "loop.toml").symlink_to(tmp / "loop.toml")


def _option_files(tmp: Path) -> None:
    (tmp / "garbage.cnf").write_text("password = x\nno section header here\n")
    (tmp / "latin1.cnf").write_bytes(b"[client]\npassword = caf\xe9\n")


def _latin1_body(tmp: Path) -> None:
    (tmp / "body.sql").write_bytes(b"INSERT INTO t VALUES (1) -- caf\xe9\n")


def _empty_bin(tmp: Path) -> None:
    (tmp / "bin").mkdir()


# (spec file content or None, arguments, fragments, prepare, environment)
# "{spec}" is the spec file written for the case, "{tmp}" the case's directory.
CASES = [
    _case(_spec(sweep='read_bufer_size = ["64K", "128K"]'), ["run", "{spec}"],
                 ["'read_bufer_size'", "did you mean read_buffer_size"], id="unknown-setting"),
    _case(_spec(sweep='read_buffer_size = ["64K", "12Q"]'), ["run", "{spec}"],
                 ["'12Q'", "K, M, G or T"], id="bad-unit"),
    _case(_spec(sweep='read_buffer_size = ["64K", "1K"]'), ["run", "{spec}"],
                 ["read_buffer_size = '1K'", "out of range", "8K to"], id="out-of-range"),
    _case(_spec(sweep='read_buffer_size = ["-1", "64K"]'), ["run", "{spec}"],
                 ["read_buffer_size = '-1'", "out of range"], id="minus-one"),
    _case(_spec(server='binary = "/nonexistent/mariadbd"'), ["run", "{spec}"],
                 ["/nonexistent/mariadbd not found"], id="missing-binary"),
    _case(_spec(server='binary = "/bin/true"'), ["run", "{spec}"],
                 ["/bin/true does not look like a MySQL or MariaDB server"], id="binary-true"),
    _case(_spec(server="binary = 5"), ["run", "{spec}"], ["binary"], id="binary-number"),
    _case(_spec(top="sweeps = 3"), ["run", "{spec}"],
                 ["unknown key 'sweeps'", "did you mean 'sweep'"], id="unknown-spec-key"),
    _case(_spec(workload='sql = "SELECT 1"\nrepetitons = 3'), ["run", "{spec}"],
                 ["[workload]", "'repetitons'", "did you mean 'repetitions'"],
                 id="unknown-workload-key"),
    _case("[sweep]\nread_buffer_size = [\"64K\",\n", ["run", "{spec}"],
                 ["spec.toml: invalid TOML"], id="invalid-toml", process=True),
    _case(None, ["run", "{tmp}/no-such-spec.toml"],
                 ["cannot read spec", "no-such-spec.toml", "No such file"], id="missing-file"),
    _case(None, ["run", "{tmp}"], ["cannot read spec", "Is a directory"], id="directory"),
    _case(b"# caf\xe9 au lait\nname = 'latin-1'\n", ["run", "{spec}"], ["spec.toml"],
                 id="not-utf8"),
    _case("[workload]\nrepetitions = 1" + "0" * 5000 + "\n", ["run", "{spec}"],
                 ["spec.toml"], id="integer-too-long"),
    _case(_spec(sweep=""), ["run", "{spec}"], ["[sweep]", "at least one setting"],
                 id="empty-sweep"),
    _case(_spec(sweep='read_buffer_size = ["64K"]'), ["run", "{spec}"],
                 ["[sweep] read_buffer_size", "at least two values"], id="one-value"),
    _case(_spec(sweep='read_buffer_size = ["128K", 131072]'), ["run", "{spec}"],
                 ["[sweep] read_buffer_size", "same value"], id="duplicate-values"),
    _case(_spec(sweep="innodb_buffer_pool_instances = [1, 2]"), ["run", "{spec}"],
                 ["'innodb_buffer_pool_instances' is not a setting of 10.11", "did you mean"],
                 id="knob-the-server-lacks"),
    _case(_spec(workload='sql = "SELECT 1"\ncache = "hot"'), ["run", "{spec}"],
                 ["cache = 'hot'", '"warm" or "cold"'], id="bad-cache-mode"),
    _case(_spec(server='[server.config]\nread_buffer_size = "64K"'), ["run", "{spec}"],
                 ["both in [server.config] and [sweep]"], id="config-and-sweep"),
    _case(_spec(sweep='log_bin = ["ON", "OFF"]'), ["run", "{spec}"],
                 ["log_bin", "cannot be tuned"], id="untunable-knob"),
    _case(_spec(sweep='optimizer_switch = ["mrr=on", "nosuchflag=on"]'),
                 ["run", "{spec}"], ["unknown nosuchflag"], id="unknown-flag"),
    _case(None, ["frobnicate"], ["invalid choice: 'frobnicate'"], id="unknown-subcommand",
          process=True),
    _case(None, ["report", "nosuchrun"], ["no run 'nosuchrun'"], id="report-nosuchrun"),
    _case(None, ["--store", "nosuch://db", "runs"], ["cannot open the results store"],
                 id="bad-store-url", process=True),
    _case(None, ["knobs", "--binary", "/nonexistent/mariadbd"],
                 ["/nonexistent/mariadbd not found"], id="knobs-missing-binary"),
    _case(None, ["knobs", "zzzqqq"], ["matches 'zzzqqq'"], id="knobs-no-match"),
    # -- unknown keys, at every level and for every workload kind
    _case(_spec(server='binry = "/usr/sbin/mariadbd"'), ["run", "{spec}"],
          ["[server]: unknown key 'binry'", "did you mean 'binary'"], id="unknown-server-key"),
    _case(_spec(dataset="rows = 1000\nrow = 5"), ["run", "{spec}"],
          ["[dataset]: unknown key 'row'", "did you mean 'rows'"], id="unknown-dataset-key"),
    _case(_spec(statistics="alpah = 0.1"), ["run", "{spec}"],
          ["[statistics]: unknown key 'alpah'", "did you mean 'alpha'"],
          id="unknown-statistics-key"),
    _case("[steps]\none_at_a_tim = true\n[[step]]\nread_buffer_size = \"64K\"\n" + STEPS,
          ["run", "{spec}"], ["[steps]: unknown key 'one_at_a_tim'", "'one_at_a_time'"],
          id="unknown-steps-key"),
    _case(SYSBENCH + "threds = 4\n" + SWEEP, ["run", "{spec}"],
          ["[workload]: unknown key 'threds'", "did you mean 'threads'"],
          id="unknown-sysbench-key"),
    _case(SYSBENCH + "sql = \"SELECT 1\"\n" + SWEEP, ["run", "{spec}"],
          ["[workload]: unknown key 'sql'"], id="query-key-in-sysbench"),
    _case(SCRIPT + "connection = 4\n" + SWEEP, ["run", "{spec}"],
          ["[workload]: unknown key 'connection'", "did you mean 'connections'"],
          id="unknown-script-key"),
    _case(_spec(workload='kind = "junk"\nsql = "SELECT 1"'), ["run", "{spec}"],
          ["[workload] kind = 'junk'", '"query", "sysbench", "script" or "replay"'],
          id="unknown-workload-kind"),
    _case(_spec(server='kind = "cloud"'), ["run", "{spec}"],
          ["[server] kind = 'cloud'", '"sandbox"', '"external"'], id="unknown-server-kind"),
    # -- wrong types
    _case(_spec(workload='sql = "SELECT 1"\nrepetitions = "five"'), ["run", "{spec}"],
          ["[workload] repetitions = 'five'", "whole number"], id="repetitions-text"),
    _case(_spec(server="config = 5"), ["run", "{spec}"],
          ["[server.config] must be a table"], id="config-not-a-table"),
    _case(_spec(top="sweep = 5", sweep="").replace("[sweep]\n", ""), ["run", "{spec}"],
          ["[sweep]", "at least one setting"], id="sweep-not-a-table"),
    _case(_spec(server='allow_durability_tradeoff = "yes"'), ["run", "{spec}"],
          ["allow_durability_tradeoff = 'yes'", "true or false"], id="flag-not-boolean"),
    _case(_spec(sweep='read_buffer_size = [{a = 1}, "64K"]'), ["run", "{spec}"],
          ["[sweep] read_buffer_size", "not a single value"], id="sweep-value-a-table"),
    _case(_spec(dataset='rows = "many"'), ["run", "{spec}"],
          ["[dataset] rows = 'many'", "whole number"], id="rows-text"),
    _case(_spec(statistics='test = "t-test"'), ["run", "{spec}"],
          ["test = 't-test'", "welch-log"], id="unknown-test"),
    # -- bad units and out-of-range values
    _case(_spec(sweep='read_buffer_size = ["64K", "-5M"]'), ["run", "{spec}"],
          ["read_buffer_size = '-5M'", "out of range", "8K to"], id="minus-5M"),
    _case(_spec(sweep='read_buffer_size = ["64K", "1.5.2G"]'), ["run", "{spec}"],
          ["'1.5.2G' is not a size", "K, M, G or T"], id="unit-1.5.2G"),
    _case(_spec(server='memory_budget = "12Q"'), ["run", "{spec}"],
          ["memory_budget", "'12Q' is not a size"], id="memory-budget-unit"),
    _case(_spec(statistics="alpha = 0.9"), ["run", "{spec}"],
          ["[statistics] alpha = 0.9", "from 1e-09 to 0.5"], id="alpha-out-of-range"),
    _case(SYSBENCH.replace("threads = 2", "threads = 0") + SWEEP, ["run", "{spec}"],
          ["[workload] threads = 0", "from 1 to"], id="threads-zero"),
    _case(SCRIPT + "connections = 0\n" + SWEEP, ["run", "{spec}"],
          ["[workload] connections = 0", "from 1 to"], id="connections-zero"),
    _case(_spec(sweep="long_query_time = [inf, 1.0]"), ["run", "{spec}"],
          ["long_query_time = inf", "out of range"], id="double-infinite"),
    _case(_spec(sweep="long_query_time = [nan, 1.0]"), ["run", "{spec}"],
          ["long_query_time = nan", "not a number"], id="double-nan"),
    _case(_spec(sweep='innodb_buffer_pool_size = ["64M", "1T"]'), ["run", "{spec}"],
          ["estimated memory", "over the budget", "memory_budget"], id="over-memory-budget"),
    _case(_spec(sweep="innodb_flush_log_at_trx_commit = [0, 1]"), ["run", "{spec}"],
          ["gives up durability", "allow_durability_tradeoff = true"],
          id="durability-refused"),
    # -- sweeps
    _case(_spec(sweep="read_buffer_size = []"), ["run", "{spec}"],
          ["[sweep] read_buffer_size", "at least two values"], id="empty-value-list"),
    _case(_spec(sweep='read_buffer_size = "64K"'), ["run", "{spec}"],
          ["[sweep] read_buffer_size", "at least two values"], id="sweep-single-value"),
    _case(_spec(sweep='read_buffer_size = ["64K", "64k"]'), ["run", "{spec}"],
          ["[sweep] read_buffer_size", "same value"], id="duplicate-case"),
    _case(_spec(sweep='engine = ["MyISAM", "Blackhole"]'), ["run", "{spec}"],
          ["engine = 'Blackhole'", "MyISAM, Aria, InnoDB"], id="unknown-engine"),
    _case(_spec(sweep='tmp_table_size = ["1M", "16M"]')
          + '[tie]\nmax_heap_table_size = "nosuch_size"\n', ["run", "{spec}"],
          ["'nosuch_size' is not a setting"], id="tie-unknown-leader"),
    # -- steps
    _case("[[step]]\n" + STEPS, ["run", "{spec}"],
          ["step 1 is empty", "at least one setting"], id="empty-step"),
    _case('[[step]]\nread_buffer_size = "64K"\n' + STEPS + SWEEP, ["run", "{spec}"],
          ["[sweep] read_buffer_size in a steps study", "put a setting in a step"],
          id="sweep-and-steps"),
    _case("[steps]\none_at_a_time = true\n" + STEPS + SWEEP, ["run", "{spec}"],
          ["[steps] is set but there is no [[step]]"], id="steps-without-step"),
    _case("[[step]]\nread_buffer_size = {a = 1}\n" + STEPS, ["run", "{spec}"],
          ["step 1", "single values"], id="step-value-a-table"),
    _case('[[step]]\nread_bufer_size = "64K"\n' + STEPS, ["run", "{spec}"],
          ["'read_bufer_size'", "did you mean read_buffer_size"], id="unknown-setting-in-step"),
    _case(_spec(server='[server.config]\nkey_bufer_size = "16M"'), ["run", "{spec}"],
          ["'key_bufer_size'", "did you mean key_buffer_size"],
          id="unknown-setting-in-config"),
    # -- server binaries
    _case(_spec(server='binary = "{tmp}/mariadbd"'), ["run", "{spec}"],
          ["/mariadbd", "executable"], id="binary-not-executable", prepare=_non_executable),
    _case(_spec(server='binary = "~nosuchuser_knoblab/mariadbd"'), ["run", "{spec}"],
          ["~nosuchuser_knoblab/mariadbd"], id="binary-unknown-home"),
    _case(_spec(server='binary = ["/usr/sbin/mariadbd"]'), ["run", "{spec}"],
          ["[server] binary", "two or more"], id="binary-list-of-one"),
    _case(_spec(server='binary = {a = "/nonexistent/a", b = "/nonexistent/b"}'),
          ["run", "{spec}"], ["no server could be used", "/nonexistent/a", "/nonexistent/b"],
          id="binary-table-none-usable"),
    # -- the spec file itself
    _case(None, ["run", "{tmp}/loop.toml"], ["cannot read spec", "loop.toml"],
          id="spec-symlink-loop", prepare=_symlink_loop),
    _case(_spec(), ["run", "{spec}/inner.toml"], ["cannot read spec", "Not a directory"],
          id="spec-path-through-a-file"),
    _case(b"\xff\xfe[sweep]\n", ["run", "{spec}"], ["spec.toml", "UTF-8"], id="binary-junk"),
    _case("[workload]\nkind = 'script'\nsetup_file = 'nosuch.sql'\nbody = 'SELECT 1'\n" + SWEEP,
          ["run", "{spec}"], ["setup_file = 'nosuch.sql'", "No such file"],
          id="setup-file-missing"),
    _case("[workload]\nkind = 'script'\nsetup = 'CREATE TABLE t (a INT)'\n"
          "body_file = 'body.sql'\n" + SWEEP, ["run", "{spec}"],
          ["body_file = 'body.sql'", "not UTF-8"], id="body-file-not-utf8",
          prepare=_latin1_body),
    _case("[workload]\nkind = 'script'\nsetup_file = \"a\\u0000b\"\nbody = 'SELECT 1'\n"
          + SWEEP, ["run", "{spec}"], ["setup_file"], id="setup-file-nul"),
    _case(SCRIPT.replace("CREATE TABLE", "CREATE TABLEX") + SWEEP, ["run", "{spec}"],
          ["script setup failed at statement 1", "TABLEX"],
          id="script-setup-sql-error", process=True),
    # -- a running server (kind = "external")
    _case(_spec(server='kind = "external"\nhost = "127.0.0.1"\nport = 1'), ["run", "{spec}"],
          ["cannot reach server root@127.0.0.1:1"], id="external-nothing-listens"),
    _case(_spec(server=EXTERNAL + '\nuser = "nobody_knoblab"'), ["run", "{spec}"],
          ["nobody_knoblab@127.0.0.1:3306 refused the login"],
          id="external-unknown-user", process=True),
    _case(_spec(server=EXTERNAL + '\npassword = "x"'), ["run", "{spec}"],
          ["never written in a spec", "password_env", "option_file"],
          id="external-password-in-spec"),
    _case(_spec(server='password = "x"'), ["run", "{spec}"],
          ["never written in a spec", "password_env"], id="sandbox-password-in-spec"),
    _case(_spec(server=EXTERNAL + '\noption_file = "{tmp}/nosuch.cnf"'), ["run", "{spec}"],
          ["option_file", "nosuch.cnf", "no such file"], id="external-option-file-missing"),
    _case(_spec(server=EXTERNAL + '\noption_file = "{tmp}/garbage.cnf"'), ["run", "{spec}"],
          ["option_file", "garbage.cnf"], id="external-option-file-garbage",
          prepare=_option_files),
    _case(_spec(server=EXTERNAL + '\noption_file = "{tmp}/latin1.cnf"'), ["run", "{spec}"],
          ["option_file", "latin1.cnf"], id="external-option-file-not-utf8",
          prepare=_option_files),
    _case(_spec(server='kind = "external"\nsocket = "{tmp}/nosuch.sock"'), ["run", "{spec}"],
          ["cannot reach server root@", "nosuch.sock"], id="external-socket-missing"),
    _case(_spec(server='kind = "external"\nsocket = "/x.sock"\nhost = "127.0.0.1"'),
          ["run", "{spec}"], ["host (and port) or socket, not both"],
          id="external-host-and-socket"),
    _case(_spec(server='kind = "external"\nport = 0'), ["run", "{spec}"],
          ["[server] port = 0", "1 to 65535"], id="external-port-zero"),
    _case(_spec(server='host = "127.0.0.1"'), ["run", "{spec}"],
          ["[server] host", 'only for kind = "external"'], id="sandbox-with-host"),
    _case(_spec(server=EXTERNAL + '\ndatabase = "my-data; DROP"'), ["run", "{spec}"],
          ["[server] database = 'my-data; DROP'", "a plain name"],
          id="external-database-not-a-plain-name"),
    _case(_spec(server=EXTERNAL + '\ndatabase = "MySQL"'), ["run", "{spec}"],
          ["[server] database = 'MySQL'", "the server's own database"],
          id="external-database-of-the-server"),
    _case(_spec(server='database = "bench"'), ["run", "{spec}"],
          ["[server] database", 'only for kind = "external"'], id="sandbox-with-database"),
    _case("[server]\n" + EXTERNAL + "\n" + SYSBENCH + SWEEP, ["run", "{spec}"],
          ["sysbench runs need a sandbox server"], id="external-sysbench"),
    _case(_spec(server=EXTERNAL + '\noption_file = "~nosuchuser_knoblab/my.cnf"'),
          ["run", "{spec}"], ["option_file", "~nosuchuser_knoblab"],
          id="external-option-file-unknown-home"),
    _case(_spec(server='kind = "external"\nhost = "' + "a" * 64 + '.example"'),
          ["run", "{spec}"], ["cannot reach server", "a" * 64],
          id="external-host-label-too-long"),
    # -- sysbench
    _case(SYSBENCH + SWEEP, ["run", "{spec}"], ["sysbench is not on PATH", "apt-get install"],
          id="sysbench-missing", process=True, prepare=_empty_bin, environ={"PATH": "{tmp}/bin"}),
    _case(SYSBENCH + 'test = "oltp_raed_write"\n' + SWEEP, ["run", "{spec}"],
          ["unknown sysbench test 'oltp_raed_write'", "did you mean 'oltp_read_write'"],
          id="sysbench-unknown-test"),
    _case(SYSBENCH + "[workload.options]\nrange_sizee = 4\n" + SWEEP, ["run", "{spec}"],
          ["no option 'range_sizee'", "range_size"], id="sysbench-unknown-option"),
    _case(SYSBENCH + "[workload.options]\nthreads = 4\n" + SWEEP, ["run", "{spec}"],
          ["option 'threads' is set by knoblab itself"], id="sysbench-reserved-option"),
    _case(SYSBENCH + "warmup = 10\n" + SWEEP, ["run", "{spec}"],
          ["warmup = 10", "shorter than the duration"], id="sysbench-warmup-too-long"),
    # -- command-line arguments
    _case(None, ["resume", "nosuchrun"], ["no run 'nosuchrun'", "knoblab runs"],
          id="resume-nosuchrun"),
    _case(None, ["restore", "nosuchrun"], ["no run 'nosuchrun'"], id="restore-nosuchrun"),
    _case(None, ["run"], ["required: spec", "--help"], id="run-without-spec"),
    _case(None, ["--frobnicate", "runs"], ["unrecognized arguments: --frobnicate"],
          id="unknown-option"),
    _case(None, ["--store", "mysql+pymysql://root:s3cr3t@127.0.0.1:1/db", "runs"],
          ["cannot open the results store", "!s3cr3t"],
          id="store-url-password-hidden", process=True),
    _case(b"not a database\n", ["--store", "sqlite:///{spec}", "runs"],
          ["cannot open the results store", "not a database"], id="store-not-a-database"),
    _case(None, ["knobs", "--binary", "/bin/true"],
          ["/bin/true does not look like a MySQL or MariaDB server"], id="knobs-binary-true"),
    # knoblab tune: the search's own section, read against the server's catalog.
    _case(TUNE.format(tune="", knobs='read_buffer_size = ["1K", "1M"]'), ["tune", "{spec}"],
          ["[tune.knobs]", "read_buffer_size", "out of range", "8K to"],
          id="tune-range", process=True),
    _case(TUNE.format(tune="", knobs=""), ["tune", "{spec}"], ["[tune.knobs] is empty"],
          id="tune-empty"),
    _case(TUNE.format(tune='storage = "postgresql://nobody@127.0.0.1:1/x"',
                      knobs='read_buffer_size = ["8K", "1M"]'), ["tune", "{spec}"],
          ["cannot open the tuning study's storage", "[tune] storage"],
          id="tune-storage", process=True),
    _case(TUNE.format(tune='budget = "1s"', knobs='read_buffer_size = ["8K", "1M"]'),
          ["tune", "{spec}"], ["cannot hold one trial"], id="tune-budget"),
    _case(TUNE.format(tune="", knobs='read_buffer_size = ["8K", "1M"]'), ["run", "{spec}"],
          ["a search ([tune])", "knoblab tune /", "!SPEC"], id="tune-spec-run"),
    _case(_spec(), ["tune", "{spec}"], ["no [tune] section"], id="run-spec-tuned"),
    _case(TUNE.format(tune="", knobs='read_buffer_size = ["1M", "1M"]'), ["tune", "{spec}"],
          ["[tune.knobs] read_buffer_size", "is empty"], id="tune-one-point"),
    _case(TUNE.format(tune='objective = "p99"', knobs='read_buffer_size = ["8K", "1M"]'),
          ["tune", "{spec}"], ["objective = 'p99'", "measures seconds"], id="tune-objective"),
    _case(TUNE.format(tune='constraint = { metric = "latency", max = 20 }',
                      knobs='read_buffer_size = ["8K", "1M"]'),
          ["tune", "{spec}"], ["constraint on 'latency'", "measures seconds"],
          id="tune-constraint"),
]


@pytest.mark.server
@pytest.mark.parametrize(("spec", "args", "fragments", "prepare", "environ", "process"), CASES)
def test_bad_input(spec, args, fragments, prepare, environ, process, env, knoblab_home,
                   tmp_path, monkeypatch, capfd):
    spec_path = tmp_path / "spec.toml"
    if isinstance(spec, bytes):
        spec_path.write_bytes(spec)
    elif spec is not None:
        spec_path.write_text(spec.replace("{tmp}", str(tmp_path)))
    if prepare is not None:
        prepare(tmp_path)
    before = set(tmp_path.iterdir())
    sandboxes_before = _sandboxes(knoblab_home)
    argv = [a.format(spec=spec_path, tmp=tmp_path) for a in args]
    changes = {k: v.replace("{tmp}", str(tmp_path)) for k, v in environ.items()}
    try:
        if process:
            result = _knoblab(argv, {**env, **changes}, tmp_path, store="--store" not in argv)
        else:
            result = knoblab_in_process(argv, {"KNOBLAB_HOME": str(knoblab_home), **changes},
                                        tmp_path, monkeypatch, capfd,
                                        store="--store" not in argv)
    finally:
        if spec_path.exists():
            spec_path.chmod(0o644)  # the unreadable case: let pytest clean up

    _no_traceback(result)
    assert result.returncode == 2, result.stderr
    message = " ".join(result.stderr.split())  # the words, however the lines were broken
    for fragment in fragments:
        if fragment.startswith("!"):
            assert fragment[1:] not in message, f"{fragment[1:]!r} leaked into {message!r}"
        else:
            assert fragment in message, f"{fragment!r} not in {message!r}"
    # warnings about the spec may come first, each on a line of its own; the error is one line
    lines = [line for line in result.stderr.strip().splitlines()
             if not line.startswith("warning: ")]
    assert len(lines) == 1, f"stderr should be one line, is {len(lines)}: {result.stderr!r}"
    assert lines[0].startswith("knoblab: ")
    assert result.stdout.strip() == ""
    assert not _servers_of(knoblab_home)
    assert _sandboxes(knoblab_home) <= sandboxes_before, "a sandbox directory was left behind"
    # Nothing written but the results store (which may hold a failed run, nothing else).
    written = {p.name for p in set(tmp_path.iterdir()) - before}
    assert written <= {"s.sqlite", "s.sqlite-journal"}, written
    if "s.sqlite" in written:
        runs = Store(f"sqlite:///{tmp_path / 's.sqlite'}").list_runs()
        assert all(run["status"] == "failed" for run in runs), runs


def _sandboxes(home: Path) -> set[str]:
    folder = home / "sandboxes"
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


# --------------------------------------------------------------------------- runs that fail


def _trials_by_value(store_url: str, knob: str) -> tuple[dict, dict[str, list]]:
    store = Store(store_url)
    runs = store.list_runs()
    assert len(runs) == 1
    run = store.run(runs[0]["id"])
    points = store.points(run["id"])
    by_value: dict[str, list] = {requested[knob]: [] for requested, _ in points}
    for trial in store.trials(run["id"]):
        by_value[points[trial.point_idx][0][knob]].append(trial)
    return run, by_value


@pytest.mark.server
def test_sql_error_every_configuration_failed(env, knoblab_home, tmp_path):
    spec = tmp_path / "broken-sql.toml"
    spec.write_text(_spec(workload='sql = "SELECT * FROM no_such_table"\nrepetitions = 1'))
    result = _knoblab(["run", str(spec)], env, tmp_path)

    _no_traceback(result)
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("knoblab: ")
    assert "every configuration failed" in last
    run, by_value = _trials_by_value(f"sqlite:///{tmp_path / 's.sqlite'}", "read_buffer_size")
    assert run["name"] == "broken-sql"
    assert set(by_value) == {"64K", "128K"}
    for trials in by_value.values():
        assert [t.status for t in trials] == ["failed"]
        assert "no_such_table" in trials[0].error
        assert trials[0].value is None
    # The report still shows each point as failed, with the reason.
    report = " ".join(result.stdout.split())
    assert report.count("failed") >= 2
    assert "no_such_table" in report
    # No placeholder leaks into the report title when no regime could be judged.
    assert not re.search(r"·\s*None\b", result.stdout), result.stdout
    assert not _servers_of(knoblab_home)


@pytest.mark.server
def test_value_the_server_refuses_at_run_time(env, knoblab_home, tmp_path):
    # default_storage_engine is set with SET GLOBAL after start-up; the server refuses an engine
    # it does not have. That point fails; the run goes on and the other point is measured.
    spec = tmp_path / "engine.toml"
    spec.write_text(_spec(sweep='default_storage_engine = ["MyISAM", "NoSuchEngine"]'))
    result = _knoblab(["run", str(spec)], env, tmp_path)

    _no_traceback(result)
    assert result.returncode == 0, result.stderr
    assert "NoSuchEngine" in result.stderr
    _, by_value = _trials_by_value(f"sqlite:///{tmp_path / 's.sqlite'}",
                                   "default_storage_engine")
    assert [t.status for t in by_value["MyISAM"]] == ["done"]
    assert by_value["MyISAM"][0].value > 0
    assert [t.status for t in by_value["NoSuchEngine"]] == ["failed"]
    assert "NoSuchEngine" in by_value["NoSuchEngine"][0].error
    assert not _servers_of(knoblab_home)


@pytest.mark.server
def test_very_long_spec_name(env, knoblab_home, tmp_path):
    # The results folder is named after the spec; 300 characters is more than a file name may
    # have. Refusing the name up front (exit 2, one line) or shortening the folder (exit 0) are
    # both fine; an OSError traceback after the whole run is not.
    spec = tmp_path / "long.toml"
    spec.write_text(_spec(top=f'name = "{"x" * 300}"'))
    result = _knoblab(["run", str(spec)], env, tmp_path)

    _no_traceback(result)
    assert result.returncode in (0, 2), result.stderr
    if result.returncode == 2:
        assert "name" in result.stderr.strip().splitlines()[-1]
    assert not _servers_of(knoblab_home)


# --------------------------------------------------------------------------- report output paths


def _stored_run(url: str, name: str = "stored") -> str:
    """A finished two-point run written straight into a store (no server needed)."""
    store = Store(url)
    run_id = store.create_run(
        name=name, experiment="sweep", spec_source="", server_binary="/usr/sbin/mariadbd",
        server_version="10.11.19-MariaDB",
        info=RunInfo.from_json({
            "knobs": ["read_buffer_size"], "defaults": {"read_buffer_size": "131072"},
            "base": {}, "dataset": {"kind": "scan-table", "engine": "MyISAM", "rows": 1000},
            "workload": {"kind": "query", "sql": "SELECT 1", "cache": "warm",
                         "repetitions": 3},
            "statistics": {"min_effect": 0.03, "alpha": 0.05, "confidence": 0.95,
                           "test": "welch-log", "seed": 1}}),
        point_list=[({"read_buffer_size": "64K"}, {"read_buffer_size": "65536"}),
                    ({"read_buffer_size": "128K"}, {"read_buffer_size": "131072"})],
    )
    position = 0
    for repetition in range(3):
        for point, seconds in ((0, 1.0), (1, 0.5)):
            trial = store.begin_trial(run_id, point_idx=point, repetition=repetition,
                                      position=position)
            store.finish_trial(trial, status="done", value=seconds * (1 + repetition / 100),
                               effective={"read_buffer_size": ["65536", "131072"][point]},
                               details={"regime": "CPU-bound"})
            position += 1
    store.set_status(run_id, "done")
    return run_id


@pytest.mark.server
def test_report_of_a_stored_run_works(env, tmp_path):
    run_id = _stored_run(f"sqlite:///{tmp_path / 's.sqlite'}")
    result = _knoblab(["report", run_id[:5], "--out", str(tmp_path / "out"),
                       "--json", str(tmp_path / "r.json")], env, tmp_path)
    _no_traceback(result)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "r.json").exists()
    assert (tmp_path / "out" / "result.json").exists()


@pytest.mark.server
@pytest.mark.parametrize("option", ["--out", "--json"])
def test_report_to_a_path_that_cannot_be_written(env, tmp_path, option):
    run_id = _stored_run(f"sqlite:///{tmp_path / 's.sqlite'}")
    (tmp_path / "plain-file").write_text("")
    target = tmp_path / "plain-file" / "sub"
    result = _knoblab(["report", run_id, option, str(target)], env, tmp_path)

    _no_traceback(result)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("knoblab: ")
    assert "plain-file" in lines[0]
