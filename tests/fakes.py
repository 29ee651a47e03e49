"""A fake workload kind and a fake server target: deterministic and in-process, so the run
loop (plan → trial → store → results, resume, failures) is tested in milliseconds.

They follow the same protocols as the real ones (`knoblab.workloads.base.Workload`,
`knoblab.datasets.Dataset`, `knoblab.server.target.Target`); the real ones are tested against
real servers elsewhere.

Below them, the plain helpers many tests share: the running server they measure on, and
`knoblab` run as a user runs it (its environment, its command, the servers it leaves running).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pymysql
import pytest

from knoblab.catalog import Catalog, Knob
from knoblab.connection import DATABASE, Progress, Server
from knoblab.datasets import Dataset
from knoblab.errors import STOP
from knoblab.keys import Key, Keys
from knoblab.server.target import Data, ServerRefused
from knoblab.workloads.base import (
    Measured,
    Recorder,
    Rounds,
    WorkloadError,
)
from knoblab.workloads.timed import Timed


class Quiet:
    """A run's listener that keeps the messages and trials it is told, for assertions."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def message(self, text: str) -> None:
        self.lines.append(text)

    def dataset_progress(self, done: int, total: int) -> None: ...
    def decision(self, undecided: list[str], most_left: int, budget_left: float | None
                 ) -> None: ...
    def plan(self, total: int, done: int, unit: str) -> None: ...
    def trial(self, label, repetition, status, value, error) -> None:
        self.lines.append(f"{label} {status} {value} {error}")
    def second(self, label, second) -> None: ...


@dataclass
class Script:
    """What the fakes do, set by each test: times per value, failures, an interrupt."""

    seconds: dict[str, float] = field(default_factory=dict)  # by sort_buffer_size
    fails: dict[str, str] = field(default_factory=dict)  # value -> WorkloadError message
    refuses: set[str] = field(default_factory=set)  # values the server will not start with
    rows: dict[str, int] = field(default_factory=dict)  # rows the statement returns, by value
    interrupt_at: int | None = None  # Ctrl-C during this measurement (1-based)
    # A stop whose KeyboardInterrupt Python dropped (raised in a finaliser): only the flag
    stop_flag_at: int | None = None
    measured: list[dict[str, str]] = field(default_factory=list)  # settings, in order
    started: list[dict[str, str]] = field(default_factory=list)  # every configured() call
    sessions: list[str] = field(default_factory=list)  # "open", "closed"
    built: list[str] = field(default_factory=list)  # data keys built
    spread: float = 0.01  # measurements vary within ×1 to ×(1 + spread), deterministically
    sleep: float = 0.0  # seconds each measurement takes
    start_sleep: float = 0.0  # seconds each server start takes
    parts: int = 1  # separately timed parts per measurement (each one a measure() call)
    # seconds as a function of every setting the fake server has (instead of `seconds`)
    model: Callable[[dict[str, str]], float] | None = None
    # a second figure of each measurement ("memory", in the details), from the same settings
    memory: Callable[[dict[str, str]], float] | None = None
    # the first load after each server start (measured or a warm-up) takes this many times
    # as long: a cold buffer pool
    cold_first: float = 1.0
    warmed: list[dict[str, str]] = field(default_factory=list)  # warm-up passes, in order
    # every load in order: timed or not, its key_buffer_size, the first of its start or not
    loads: list[tuple[bool, str | None, bool]] = field(default_factory=list)
    # settings whose value set in place (SET GLOBAL) the server halves, as a server that
    # resizes in chunks might: not what a start with the value makes of it
    halved_in_place: set[str] = field(default_factory=set)


SCRIPT = Script()


class FakeData(Dataset):
    """Data that is only counted when built."""

    key = "fake-data"

    def label(self, then: str = "") -> str:
        return f"fake data{then}"

    def build(self, server: Server, progress: Progress | None = None) -> None:
        SCRIPT.built.append(self.key)

    def estimated_bytes(self) -> int:
        return 0


@dataclass(frozen=True)
class FakeWorkload(Timed):
    kind: ClassVar[str] = "fake"
    parameters: ClassVar[tuple[str, ...]] = ()
    keys: ClassVar[Keys] = Keys(
        Key("kind", "The fake kind of the tests: times that need no server.",
            choices=("fake",))) | Rounds.KEYS
    writes_data: ClassVar[bool] = False

    rounds: Rounds = Rounds(fixed=3, design="restarts")

    @classmethod
    def from_spec(cls, section: dict[str, Any], dataset: dict[str, Any],
                  sweep: dict[str, list[Any]], base_dir: Path | None) -> FakeWorkload:
        return cls(rounds=Rounds.from_spec(section) if section.keys() & Rounds.KEYS.names
                   else Rounds(fixed=3, design="restarts"))

    def parameter_axis(self, name: str, values: list[Any]) -> list[str]:
        raise AssertionError("the fake kind has no parameters")

    def dataset(self, requested: Mapping[str, str]) -> Dataset:
        return FakeData()

    def connections_for(self, requested: Mapping[str, str]) -> int:
        return 1

    def measure(self, server: Server, requested: Mapping[str, str], session_knobs: list[str],
                recorder: Recorder) -> Measured:
        settings = server.global_values(["sort_buffer_size"])
        SCRIPT.measured.append(settings)
        if SCRIPT.interrupt_at == len(SCRIPT.measured):
            raise KeyboardInterrupt
        if SCRIPT.stop_flag_at == len(SCRIPT.measured):
            STOP.set()
        value = settings["sort_buffer_size"]
        if value in SCRIPT.fails:
            raise WorkloadError(SCRIPT.fails[value])
        # Deterministic, with a small spread so that the statistics have something to do.
        spread = 1 + SCRIPT.spread * (len(SCRIPT.measured) * 7919 % 13) / 12
        if not server.loads:
            spread *= SCRIPT.cold_first
        cache = server.global_values(["key_buffer_size"]).get("key_buffer_size")
        SCRIPT.loads.append((True, cache, not server.loads))
        server.loads += 1
        time.sleep(SCRIPT.sleep)
        both = server.global_values(list(fake_catalog().knobs))  # every setting it has
        seconds = SCRIPT.seconds.get(value, 1.0) if SCRIPT.model is None else SCRIPT.model(both)
        details: dict[str, Any] = {"rows": SCRIPT.rows.get(value, 1)}
        if SCRIPT.memory is not None:
            details["memory"] = SCRIPT.memory(both)
        return Measured(seconds * spread, details)

    @property
    def parts(self) -> int:
        return SCRIPT.parts

    def measure_part(self, server: Server, requested: Mapping[str, str],
                     session_knobs: list[str], recorder: Recorder) -> Measured:
        return self.measure(server, requested, session_knobs, recorder)

    def join(self, parts: list[Measured]) -> Measured:
        fastest = min(parts, key=lambda m: m.value)
        return Measured(fastest.value, {**fastest.details, "runs": [m.value for m in parts]})

    def warm_up(self, server: Server, requested: Mapping[str, str],
                session_knobs: list[str]) -> None:
        SCRIPT.warmed.append(server.global_values(["sort_buffer_size"]))
        cache = server.global_values(["key_buffer_size"]).get("key_buffer_size")
        SCRIPT.loads.append((False, cache, not server.loads))
        server.loads += 1

    def describe(self) -> dict[str, object]:
        return {}


def fake_catalog() -> Catalog:
    def size(name: str, default: str, scope: str = "SESSION") -> Knob:
        return Knob(name, "BIGINT UNSIGNED", scope, default, 1024, 2**40, 1, (), True, True)

    return Catalog("fake-server 1.0",
                   {"sort_buffer_size": size("sort_buffer_size", "2097152"),
                    "read_buffer_size": size("read_buffer_size", "131072"),
                    # a cache of the whole server's, as a real key cache
                    "key_buffer_size": size("key_buffer_size", "134217728", "GLOBAL")})


class FakeServer:
    """A server that applies whatever it is given."""

    database = DATABASE

    def __init__(self, settings: Mapping[str, str]) -> None:
        self.settings = dict(settings)
        self.loads = 0  # measurements and warm-ups since it started
        self.pid: int | None = None
        self.datadir: Path | None = None
        self.socket: Path | None = None

    def connect(self, database: str | None = None, **kwargs: Any) -> FakeConnection:
        return FakeConnection(self)

    def global_values(self, names: list[str]) -> dict[str, str]:
        # As a real server: what was set, else the default.
        defaults = {name: knob.default for name, knob in fake_catalog().knobs.items()}
        return {name: self.settings.get(name) or defaults[name] for name in names
                if name in self.settings or defaults.get(name)}

    def watch(self, expected: Any = None) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()  # nothing a fake workload could change

    def drop_cache(self) -> bool:
        return False


class FakeConnection:
    """Takes SET GLOBAL name = value (and nothing else); refuses the values a test says the
    server refuses."""

    def __init__(self, server: FakeServer) -> None:
        self.server = server

    def cursor(self) -> FakeConnection:
        return self

    def __enter__(self) -> FakeConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        if re.fullmatch(r"SET SESSION \w+ = 0", sql):
            return  # knoblab's own session, free of the workload's limits
        match = re.fullmatch(r"SET GLOBAL (\w+) = %s", sql)
        if match is None:
            raise AssertionError(f"the fake server takes only SET GLOBAL, not {sql!r}")
        value = str(params[0])
        if value in SCRIPT.refuses:
            raise pymysql.err.OperationalError(1231, f"Variable '{match[1]}' can't be set to "
                                                     f"the value of '{value}'")
        if match[1] in SCRIPT.halved_in_place and value.isdigit():
            value = str(int(value) // 2)
        self.server.settings[match[1]] = value

    def close(self) -> None:
        pass


class FakeTarget:
    label = ""
    version = "fake-server 1.0"
    local = False

    def __init__(self) -> None:
        self.catalog = fake_catalog()

    def describe(self) -> dict[str, object]:
        return {"label": self.label, "binary": "fake", "version": self.version,
                "version_line": self.version, "compile": {}}

    def check(self, names: list[str], store: Any, resuming: str | None) -> None:
        pass

    def check_workload(self, check_running_server: Any, data_keys: set[str]) -> None:
        pass

    def defaults(self, names: list[str]) -> dict[str, str | None]:
        return {name: self.catalog.knobs[name].default for name in names}

    def prepare(self, data: Data) -> Path | None:
        data.build(FakeServer({}))
        return None

    def data_message(self, label: str) -> str:
        return f"data: {label}"

    @contextmanager
    def session(self, store: Any, run_id: str, touched: list[str]) -> Iterator[None]:
        SCRIPT.sessions.append("open")
        try:
            yield
        finally:
            SCRIPT.sessions.append("closed")

    def check_shape(self, shape: Any) -> None:
        """A fake server has no machine to shape."""

    @contextmanager
    def configured(self, settings: Mapping[str, str], data: Data, shape: Any = None
                   ) -> Iterator[tuple[Server, dict[str, Any]]]:
        SCRIPT.started.append(dict(settings))
        time.sleep(SCRIPT.start_sleep)
        if settings.get("sort_buffer_size") in SCRIPT.refuses:
            raise ServerRefused("the server did not start: unknown option (error log)")
        yield FakeServer(settings), {"start_seconds": 0.0}


def open_fake(spec: Any, home: Path, message: Any) -> tuple[dict[str, Any], dict[str, str]]:
    return {"": FakeTarget()}, {}


# --- the running server and the command line ------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
# The MariaDB some tests measure on, as a [server] section reaches it (beyond kind and database).
RUNNING: dict[str, Any] = {"host": "127.0.0.1", "port": 3306, "user": "root"}
# The tests whose doings on that server are server-wide: they change its GLOBAL settings, or
# capture what every client runs there (the slow log). Side by side each would see the
# other's, so they run one at a time: pytest-xdist (--dist loadgroup) sends them to one
# worker, and a lock on the server itself (tests/conftest.py) keeps them apart wherever they
# run, other test sessions' included.
SERVER_WIDE = pytest.mark.xdist_group("running-server-wide")


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of `knoblab` as a user's script runs it: this home, no terminal size (as
    in a pipe), no store but the one given, this checkout's knoblab; `extra` on top."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "KNOBLAB_STORE")}
    env["KNOBLAB_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return {**env, **extra}


def cli_command(store: Path, *args: str) -> list[str]:
    """`knoblab --store STORE ARGS` as a process of its own (STORE: an SQLite file)."""
    return [sys.executable, "-m", "knoblab.cli", *store_args(store, *args)]


def store_args(store: Path, *args: str) -> list[str]:
    """The arguments of `knoblab --store STORE ARGS` (STORE: an SQLite file)."""
    return ["--store", f"sqlite:///{store}", *args]


def servers_under(home: Path) -> list[int]:
    """Server processes still running from sandboxes in `home`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(home) in cmdline and ("mariadbd" in cmdline or "mysqld" in cmdline):
            found.append(int(entry.name))
    return found


def query(server: Server, sql: str, database: str | None = DATABASE) -> tuple[Any, ...]:
    """The rows `sql` returns on `server`, in `database` (knoblab's own by default)."""
    conn = server.connect(database)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return tuple(cur.fetchall())
    finally:
        conn.close()


@contextmanager
def reaped(proc: subprocess.Popen[Any]) -> Iterator[subprocess.Popen[Any]]:
    """`proc`, killed at the end of the block if it still runs (after a failed check too)."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main_here(argv: list[str]) -> tuple[int, str]:
    """`knoblab.cli.main(argv)` in this process: its exit code as a process's (returned, or
    raised by argparse; sys.exit("text") is 1) and what Python would have printed for it. main()
    takes the stopping signals for itself: the test's handlers are back after."""
    import signal

    from knoblab import cli, stopping

    handlers = {signum: signal.getsignal(signum)
                for signum in (*stopping.STOPPING_SIGNALS, signal.SIGALRM)}
    unraisable = sys.unraisablehook
    try:
        code: int | str | None = cli.main(list(argv))
    except SystemExit as exit_:
        code = exit_.code
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        sys.unraisablehook = unraisable
    if code is None:
        return 0, ""
    if not isinstance(code, int):
        return 1, f"{code}\n"
    return code, ""


def knoblab_here(argv: list[str], env: Mapping[str, str], cwd: Path | None = None
                 ) -> subprocess.CompletedProcess[str]:
    """`knoblab ARGV` run by `knoblab.cli.main` in this process, as a process of its own would
    run it (`env` its whole environment, `cwd` its folder, its output captured): for a test of
    what a command says and does, not of a process's life (signals, exit by a kill), which
    keeps a process of its own. The environment and the folder are the test's again after."""
    import io

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    os.environ.clear()
    os.environ.update(env)
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code, exited = main_here(argv)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue() + exited)
