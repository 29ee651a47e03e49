"""Throwaway servers in private directories, and the templates they are copied from.

A sandbox is one start of the server binary on a fresh copy of a template datadir, configured by
a my.cnf of its own, listening only on a unix socket in a 0700 directory. Every sandbox started
is stopped again: by `stop()`, by the atexit hook on an exception or Ctrl-C, by the kernel
(PR_SET_PDEATHSIG) if knoblab itself is killed, and by `reap_orphans()` at the next start as a
last resort.
"""

from __future__ import annotations

import atexit
import ctypes
import fcntl
import functools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pymysql

from knoblab.catalog import Catalog, read_catalog
from knoblab.errors import UserError
from knoblab.server.binary import ServerBinary

START_TIMEOUT = 120.0
STOP_TIMEOUT = 120.0
_LIVE: set[Sandbox] = set()


class ServerStartError(UserError):
    """The server refused to start with a configuration; the message has the error log's tail."""


def knoblab_home() -> Path:
    """Where templates, sandboxes and the default store live ($KNOBLAB_HOME or ~/.knoblab)."""
    home = Path(os.environ.get("KNOBLAB_HOME") or Path.home() / ".knoblab").expanduser()
    home.mkdir(parents=True, exist_ok=True)
    return home


class Sandbox:
    """One server start. Use as a context manager, or call start() and stop()."""

    def __init__(self, binary: ServerBinary, datadir_source: Path, settings: Mapping[str, str],
                 *, home: Path | None = None, copy: bool = True) -> None:
        self.binary = binary
        self.settings = dict(settings)
        self.home = home or knoblab_home()
        self.dir = self.home / "sandboxes" / uuid.uuid4().hex[:12]
        self.datadir = self.dir / "data" if copy else datadir_source
        self._source = datadir_source if copy else None
        self.socket_dir: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.copy_seconds = 0.0
        self.start_seconds = 0.0

    @property
    def socket(self) -> Path:
        assert self.socket_dir is not None, "sandbox not started"
        return self.socket_dir / "mysqld.sock"

    @property
    def error_log(self) -> Path:
        return self.dir / "error.log"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = START_TIMEOUT) -> None:
        self.dir.mkdir(parents=True, mode=0o700)
        (self.dir / "tmp").mkdir(mode=0o700)
        self._write_owner()  # before anything slow: an interrupted copy is still cleaned up
        if self._source is not None:
            began = time.perf_counter()
            copy_datadir(self._source, self.datadir)
            self.copy_seconds = time.perf_counter() - began
        # A short, private socket path: unix socket paths are limited to ~107 bytes.
        self.socket_dir = Path(tempfile.mkdtemp(prefix="knoblab-"))
        os.chmod(self.socket_dir, 0o700)
        cnf = self.dir / "my.cnf"
        cnf.write_text(self._config_text())
        began = time.perf_counter()
        _LIVE.add(self)
        self.process = subprocess.Popen(
            [str(self.binary.path), f"--defaults-file={cnf}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches knoblab, which shuts the server down itself
            preexec_fn=functools.partial(_die_with_parent, os.getpid()),
        )
        self._write_owner()
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.perf_counter() - began

    def _write_owner(self) -> None:
        (self.dir / "owner.json").write_text(json.dumps({
            "owner_pid": os.getpid(), "server_pid": self.pid,
            "socket_dir": str(self.socket_dir or ""), "defaults_file": str(self.dir / "my.cnf"),
        }))

    def connect(self, database: str | None = None, **kwargs: object) -> pymysql.Connection:
        return pymysql.connect(unix_socket=str(self.socket), user="root", password="",
                               database=database, autocommit=True, **kwargs)

    def global_values(self, names: list[str]) -> dict[str, str]:
        """The values the server really applied (it rounds and sometimes ignores settings)."""
        return read_globals(self.connect, names)

    def stop(self) -> None:
        """Shut down cleanly, then TERM, then KILL; remove the private directories."""
        process = self.process
        if process is not None and process.poll() is None:
            steps: list[tuple[signal.Signals | None, float]] = [(None, STOP_TIMEOUT)]
            try:
                conn = self.connect(connect_timeout=5)
                conn.query("SHUTDOWN")
                conn.close()
            except pymysql.MySQLError:
                # Not listening yet (stopped mid-start) or hung: nothing will shut it down
                # unless it is told by a signal, so do not wait for it first.
                steps = []
            for sig, wait in (*steps, (signal.SIGTERM, 30.0), (signal.SIGKILL, 30.0)):
                if sig is not None:
                    process.send_signal(sig)
                try:
                    process.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        elif process is not None:
            process.wait()
        self.process = None  # only now: a Ctrl-C during shutdown leaves it to stop_all()
        _LIVE.discard(self)
        if self.socket_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    def error_log_tail(self, lines: int = 6) -> str:
        try:
            text = self.error_log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no error log)"
        relevant = [line for line in text if "[ERROR]" in line or "[Warning]" in line] or text
        return " | ".join(line.strip() for line in relevant[-lines:])

    def _config_text(self) -> str:
        lines = [
            "[mysqld]",
            f"datadir = {self.datadir}",
            f"socket = {self.socket}",
            f"pid-file = {self.dir / 'mysqld.pid'}",
            f"log-error = {self.error_log}",
            # A private tmpdir: on-disk temporary tables must not collide with other programs.
            f"tmpdir = {self.dir / 'tmp'}",
            "skip-networking",
        ]
        if os.geteuid() == 0:
            lines.append("user = root")
        lines += [f"{name} = {value}" for name, value in self.settings.items()]
        return "\n".join(lines) + "\n"

    def _wait_ready(self, timeout: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise ServerStartError(
                    f"{self.binary.path.name} exited during start-up (code "
                    f"{self.process.returncode}): {self.error_log_tail()}"
                )
            if self.socket.exists():
                try:
                    self.connect(connect_timeout=2).close()
                    return
                except pymysql.MySQLError:
                    pass
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"{self.binary.path.name} not ready after {timeout:.0f} s: "
                    f"{self.error_log_tail()}"
                )
            time.sleep(0.05)


def read_globals(connect: Callable[[], pymysql.Connection], names: list[str]) -> dict[str, str]:
    """SHOW GLOBAL VARIABLES for `names`, on a new connection; lower-case names."""
    if not names:
        return {}
    conn = connect()
    try:
        with conn.cursor() as cur:
            marks = ", ".join(["%s"] * len(names))
            cur.execute(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({marks})", names)
            return {name.lower(): value for name, value in cur.fetchall()}
    finally:
        conn.close()


def alive(pid: int) -> bool:
    """Whether a process with this id exists (one of another user counts)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def copy_datadir(source: Path, target: Path) -> None:
    # copyfile uses the kernel's in-place copy (sendfile/copy_file_range); no metadata needed.
    shutil.copytree(source, target, copy_function=shutil.copyfile)
    # A buffer-pool dump would make every start warm whatever the cache mode asks for.
    (target / "ib_buffer_pool").unlink(missing_ok=True)


def stop_all() -> None:
    """Stop every sandbox this process started (atexit, and the CLI's signal handling)."""
    for sandbox in list(_LIVE):
        sandbox.stop()


atexit.register(stop_all)


def _die_with_parent(parent: int) -> None:
    # If knoblab is killed (kill -9), the kernel kills the server too.
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # knoblab died before the prctl took effect
        os._exit(1)


def reap_orphans(home: Path | None = None) -> int:
    """Stop sandboxes left behind by a knoblab process that no longer exists; how many."""
    home = home or knoblab_home()
    reaped = 0
    for owner_file in (home / "sandboxes").glob("*/owner.json"):
        try:
            owner = json.loads(owner_file.read_text())
        except (OSError, ValueError):
            continue
        if alive(owner["owner_pid"]):
            continue
        server_pid = owner.get("server_pid")
        if server_pid and alive(server_pid) and owner["defaults_file"] in _cmdline(server_pid):
            os.kill(server_pid, signal.SIGKILL)
            reaped += 1
        if owner.get("socket_dir"):
            shutil.rmtree(owner["socket_dir"], ignore_errors=True)
        shutil.rmtree(owner_file.parent, ignore_errors=True)
    return reaped


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


# --- templates ------------------------------------------------------------------------------


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def base_template(binary: ServerBinary, home: Path | None = None) -> Path:
    """An initialised, empty datadir for this binary, made once and kept; its catalog beside it."""
    home = home or knoblab_home()
    root = home / "templates" / binary.slug
    base = root / "base"
    with _locked(root / ".lock"):
        if (base / ".ready").exists():
            return base
        shutil.rmtree(base, ignore_errors=True)
        _remove_dead_builds(root)
        building = root / f"base.building-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir(parents=True)
        data = building / "data"
        out = subprocess.run(binary.install_db_command(data), capture_output=True, text=True,
                             check=False)
        if out.returncode != 0:
            tail = " | ".join((out.stdout + out.stderr).strip().splitlines()[-4:])
            raise UserError(f"initialising a datadir for {binary.path} failed: {tail}")
        with Sandbox(binary, data, {}, home=home, copy=False) as server:
            conn = server.connect()
            try:
                catalog = read_catalog(conn)
            finally:
                conn.close()
        catalog.save(building / "catalog.json")
        (data / "ib_buffer_pool").unlink(missing_ok=True)
        building.rename(base)
        (base / ".ready").touch()
        return base


def _remove_dead_builds(root: Path) -> None:
    """Half-built templates of a knoblab that was killed (called under the lock)."""
    for folder in root.glob("*.building-*"):
        pid = folder.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def catalog_for(binary: ServerBinary, home: Path | None = None) -> Catalog:
    return Catalog.load(base_template(binary, home) / "catalog.json")


def derived_template(binary: ServerBinary, key: str, build: Callable[[Sandbox], None],
                     home: Path | None = None) -> Path:
    """A datadir made from the base template by `build` (e.g. loading a dataset), kept by key."""
    home = home or knoblab_home()
    base = base_template(binary, home)
    root = home / "templates" / binary.slug
    target = root / key
    with _locked(root / ".lock"):
        if (target / ".ready").exists():
            return target / "data"
        shutil.rmtree(target, ignore_errors=True)
        _remove_dead_builds(root)
        building = root / f"{key}.building-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir(parents=True)
        copy_datadir(base / "data", building / "data")
        try:
            with Sandbox(binary, building / "data", {}, home=home, copy=False) as server:
                build(server)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
        (building / "data" / "ib_buffer_pool").unlink(missing_ok=True)
        building.rename(target)
        (target / ".ready").touch()
        return target / "data"
