"""Throwaway servers in private directories, and the templates they are copied from.

A sandbox is one start of the server binary on a fresh copy of a template datadir, configured by
a my.cnf of its own, listening only on a unix socket in a 0700 directory. Every sandbox started
is stopped again: by `stop()`, by the atexit hook on an exception or Ctrl-C, by the kernel
(PR_SET_PDEATHSIG) if knoblab itself is killed, and by `reap_orphans()` at the next start as a
last resort.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import fcntl
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pymysql

from knoblab import places, safety
from knoblab.catalog import Catalog, read_catalog
from knoblab.connection import ACCESS_DENIED, DATABASE, Server
from knoblab.errors import UserError
from knoblab.machine import filesystem
from knoblab.owners import alive, left_behind
from knoblab.places import knoblab_home
from knoblab.server.binary import ServerBinary, compile_info
from knoblab.server.cgroups import Group, Hierarchy
from knoblab.server.cgroups import reap as reap_groups
from knoblab.server.datadir import copy_datadir, uncache
from knoblab.server.guard import watching
from knoblab.server.settings import read_globals, set_globals
from knoblab.server.shape import Shape
from knoblab.server.target import Data, NoSpace, ServerRefused, Tampered
from knoblab.units import format_size

START_TIMEOUT = 120.0
STOP_TIMEOUT = 120.0
# What says a server's disk is full: its own words in the error log (MyISAM and Aria wait
# for space; InnoDB fails the write), or almost nothing left on the disk.
DISK_FULL = re.compile(r"Disk is full|No space left on device|Errcode: 28\b|errno: 28\b|"
                       r"error 28\b|\(errno 28\)", re.IGNORECASE)
DISK_FULL_BYTES = 1 << 20
SHUTDOWN_WAIT = 10.0  # for a server that stopped answering to finish shutting down
DISK_WATCH_EVERY = 0.25
_LIVE: set[Sandbox] = set()
_HURRY = False  # set by hurry(): stop() kills at once


class OutOfMemory(ServerRefused):
    """The kernel killed the server for want of memory ([machine] memory): the configuration
    does not fit the machine, and will not on another try."""


class ServerStartError(ServerRefused):
    """The server refused to start with a configuration; the message has the error log's tail."""


class Sandbox:
    """One server start. Use as a context manager, or call start() and stop()."""

    database = DATABASE  # a sandbox is knoblab's alone: its data always lives in this one

    def __init__(self, binary: ServerBinary, datadir_source: Path, settings: Mapping[str, str],
                 *, home: Path | None = None, copy: bool = True,
                 shape: Shape | None = None) -> None:
        self.binary = binary
        self.settings = dict(settings)
        self.home = home or knoblab_home()
        # The owner's pid in the name: a folder whose owner died is debris, whatever state
        # its killed owner left it in (even before owner.json was written).
        self.dir = self.home / "sandboxes" / f"{uuid.uuid4().hex[:12]}-{os.getpid()}"
        self.datadir = self.dir / "data" if copy else datadir_source
        # [machine] datadir: the data (and the on-disk temporary tables) on the file system
        # under test, in a folder named after the sandbox's, so that the reaper finds it.
        self.shape = shape
        self.group: Group | None = None  # its control group, while it runs ([machine] limits)
        self.data_root: Path | None = None
        if copy and shape is not None and shape.datadir is not None:
            self.data_root = shape.datadir / f"knoblab-{self.dir.name}"
            self.datadir = self.data_root / "data"
        self._source = datadir_source if copy else None
        self.socket_dir: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.copy_seconds = 0.0
        self.start_seconds = 0.0
        self.full: str | None = None  # set when its disk filled up while it ran: why
        self._watch_disk: threading.Event | None = None

    @property
    def socket(self) -> Path:
        assert self.socket_dir is not None, "sandbox not started"
        return self.socket_dir / "mysqld.sock"

    @property
    def error_log(self) -> Path:
        return self.dir / "error.log"

    @property
    def files(self) -> Path:
        """The one folder the server may read and write files in (secure_file_priv): SELECT
        ... INTO OUTFILE and LOAD DATA INFILE run as the server's user, root here."""
        return self.dir / "files"

    @property
    def plugins(self) -> Path:
        """The server's plugin folder: empty, so that no statement (INSTALL SONAME, a dump's
        or a log's) loads server code the sandbox was not started with."""
        return self.dir / "plugins"

    @property
    def tmpdir(self) -> Path:
        """Where the server writes its on-disk temporary tables: beside its data."""
        return (self.data_root or self.dir) / "tmp"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Copy, configure and start; on any failure nothing is left behind (server, folder,
        socket), and a full disk says so (NoSpace) instead of failing somewhere inside."""
        if self._source is not None:
            need_space(self.data_root.parent if self.data_root else self.home,
                       folder_bytes(self._source) + SANDBOX_MARGIN,
                       "a sandbox (a copy of its data directory)")
        try:
            self._start(timeout)
        except OSError as exc:
            self.stop()
            if self.full:
                raise NoSpace(self.full) from None
            if exc.errno != errno.ENOSPC:
                raise
            raise NoSpace(f"the disk of {self.home} filled up while a sandbox was made: "
                          f"{exc.strerror}; free space there, or set KNOBLAB_HOME to a larger "
                          "disk") from None
        except ServerRefused:
            starved = self.starved()
            self.stop()
            if self.full:
                raise NoSpace(self.full) from None
            if starved:
                raise OutOfMemory(f"the kernel killed the server for want of memory while it "
                                  f"started: {starved}") from None
            raise
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> None:
        self.dir.mkdir(parents=True, mode=0o700)
        self._write_owner()  # before anything slow: an interrupted copy is still cleaned up
        if self.data_root is not None:
            self.data_root.mkdir(mode=0o700)
        self.tmpdir.mkdir(mode=0o700)
        self.files.mkdir(mode=0o700)
        self.plugins.mkdir(mode=0o700)
        if self._source is not None:
            began = time.perf_counter()
            copy_datadir(self._source, self.datadir)
            if self.shape is not None and self.shape.limited:
                # The copy's pages are cached on knoblab's account, outside the sandbox's
                # group: the server would read them at memory speed whatever its limits.
                uncache(self.datadir)
            self.copy_seconds = time.perf_counter() - began
        # A short, private socket path (unix socket paths are limited to ~107 bytes), named
        # and written in the owner file before it is made: a knoblab stopped or killed at any
        # point of it leaves the folder to stop() or to the reaper (made first, as mkdtemp
        # does, a kill -9 between the two left an empty folder behind).
        while True:
            name = Path(tempfile.gettempdir()) / f"knoblab-{uuid.uuid4().hex[:8]}"
            if name.exists():
                continue
            self.socket_dir = name
            self._write_owner()
            try:
                name.mkdir(mode=0o700)
                break
            except FileExistsError:
                self.socket_dir = None  # another's, made meanwhile: never ours to remove
        os.chmod(self.socket_dir, 0o700)
        cnf = self.dir / "my.cnf"
        cnf.write_text(self._config_text())
        if self.shape is not None and self.shape.limited:
            # Made before the server starts, joined by it before it runs: everything it
            # allocates, reads and writes counts against the shape.
            self.group = hierarchy().create(self.dir.name.split("-")[0],
                                            self.shape.limits(hierarchy(), self.home))
        began = time.perf_counter()
        _LIVE.add(self)
        preload = self.binary.preload
        self.process = subprocess.Popen(
            [str(self.binary.path), f"--defaults-file={cnf}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches knoblab, which shuts the server down itself
            preexec_fn=functools.partial(_start_child, os.getpid(), self.group),
            env=None if preload is None else {**os.environ, "LD_PRELOAD": str(preload)},
        )
        self._write_owner()
        self._watch_disk = threading.Event()
        threading.Thread(target=self._disk_watch, args=(self._watch_disk, self.process),
                         name="knoblab-disk-watch", daemon=True).start()
        self._wait_ready(timeout)
        self._check_private()
        self._check_preload()
        self.start_seconds = time.perf_counter() - began

    def _check_private(self) -> None:
        """A sandbox's root has no password: whatever its settings did, it must not listen
        on the network. Checked on every start; the server is stopped at once if it does."""
        assert self.process is not None
        try:
            sockets = psutil.Process(self.process.pid).net_connections(kind="inet")
        except psutil.Error:
            return  # gone already: the measurement will say so
        listening = sorted({f"{c.laddr.ip}:{c.laddr.port}" for c in sockets
                            if c.status == psutil.CONN_LISTEN})
        if listening:
            settings = ", ".join(f"{k}={v}" for k, v in self.settings.items()) or "none"
            raise UserError(f"a sandbox server listened on the network ({', '.join(listening)}) "
                            f"with the settings {settings}; knoblab stopped it at once, since a "
                            "sandbox's root has no password; remove the setting that opens a "
                            "port")

    def _check_preload(self) -> None:
        """The library the server was to start with is in its memory maps: the loader skips
        one it cannot load with a warning nobody reads, and the run would measure the
        build's own allocator under the library's name."""
        preload = self.binary.preload
        if preload is None or self.process is None:
            return
        try:
            maps = Path(f"/proc/{self.process.pid}/maps").read_text()
        except OSError:
            return  # gone already: the measurement will say so
        if str(preload.resolve()) not in maps and str(preload) not in maps:
            raise UserError(f"{self.binary.path.name} started without {preload} (preload = "
                            f"{self.binary.allocator}): it is not in the server's memory "
                            "maps; check that it is a shared library for this machine "
                            f"(file {preload} says)")

    def _write_owner(self) -> None:
        staged = self.dir / "owner.json.new"  # renamed into place: never read half-written
        staged.write_text(json.dumps({
            "owner_pid": os.getpid(), "server_pid": self.pid,
            "socket_dir": str(self.socket_dir or ""), "defaults_file": str(self.dir / "my.cnf"),
            "data_root": str(self.data_root or ""),
        }))
        staged.replace(self.dir / "owner.json")

    def connect(self, database: str | None = None, **kwargs: Any) -> pymysql.Connection:
        # A private local socket: TLS would protect nothing, and setting it up costs ~40 ms
        # of client CPU per connection (PyMySQL tries it unless told not to).
        return pymysql.connect(unix_socket=str(self.socket), user="root", password="",
                               database=database, autocommit=True, ssl_disabled=True, **kwargs)

    def drop_cache(self) -> bool:
        return self.group.drop_cache() if self.group is not None else False

    def global_values(self, names: list[str]) -> dict[str, str]:
        """The values the server really applied (it rounds and sometimes ignores settings)."""
        return read_globals(self.connect, names)

    @contextmanager
    def watch(self, expected: Mapping[str, str] | None = None) -> Iterator[None]:
        """Around one measurement: what it changed (`guard.watching`, which also checks the
        point's `expected` settings first); a disk that filled (NoSpace, naming it) and a
        server shut down during it are said as the cause."""
        try:
            with watching(self, expected=expected, everything=True):
                yield
        except Exception:
            if starved := self.starved():
                raise OutOfMemory(f"the kernel killed the server for want of memory during "
                                  f"the measurement: {starved}") from None
            if self.full:
                raise NoSpace(self.full) from None
            if self._shut_down():
                raise Tampered("the server was shut down during the measurement (a SHUTDOWN "
                               "in the workload)") from None
            raise
        if self.full:
            raise NoSpace(self.full)

    def _shut_down(self) -> bool:
        """Whether the server was told to shut down (its log says who), once it is gone."""
        if self.process is None:
            return False
        if self.process.poll() is None:
            try:
                self.connect(connect_timeout=2).close()
                return False  # it answers: whatever failed, it was not a shutdown
            except pymysql.MySQLError as exc:
                if exc.args and exc.args[0] in ACCESS_DENIED:
                    return False  # it answers, refusing the login: a running server
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=SHUTDOWN_WAIT)
        try:
            text = self.error_log.read_text(errors="replace")
        except OSError:
            return False
        return "initiated by:" in text and "Normal shutdown" in text

    def _disk_watch(self, done: threading.Event, process: subprocess.Popen[bytes]) -> None:
        """The server waits, without end, for space when its disk is full (it logs "Disk is
        full writing ..." and retries every minute), or fails in ways that do not say so. A
        sign of it in the error log, or a disk with no space left, stops the server at once:
        its data is thrown away anyway, and the measurement fails naming the disk."""
        offset = 0
        while not done.wait(DISK_WATCH_EVERY):
            seen = None
            try:
                with open(self.error_log, "rb") as log:
                    log.seek(offset)
                    chunk = log.read()
                cut = chunk.rfind(b"\n") + 1
                offset += cut
                lines = chunk[:cut].decode(errors="replace").splitlines()
                seen = next((_said(line) for line in lines if DISK_FULL.search(line)), None)
                stats = os.statvfs(self.datadir)
            except OSError:
                continue  # not there yet, or being removed
            # The server runs as root here when knoblab does: root may use the reserved blocks.
            free = (stats.f_bfree if os.geteuid() == 0 else stats.f_bavail) * stats.f_frsize
            if seen is None and free >= DISK_FULL_BYTES:
                continue
            said = f"the server: {seen}" if seen else \
                f"{safety.format_size_rounded(free)} left"
            self.full = (f"the disk of {self.home} filled up during the measurement ({said}); "
                         "free space there, or set KNOBLAB_HOME to a larger disk")
            with contextlib.suppress(OSError):
                process.kill()
            return

    def stop(self) -> None:
        """Shut down cleanly, then TERM, then KILL; remove the private directories."""
        process = self.process
        if process is not None and process.poll() is None and _HURRY:
            process.kill()
            process.wait()
        elif process is not None and process.poll() is None:
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
        if self._watch_disk is not None:
            self._watch_disk.set()
        _LIVE.discard(self)
        if self.socket_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
        if self.group is not None:
            self.group.remove()
            self.group = None
        if self.data_root is not None:
            shutil.rmtree(self.data_root, ignore_errors=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    def starved(self) -> str | None:
        """Why the kernel killed a process of the sandbox for memory, when it did: what the
        shape gave and what to do about it."""
        if self.group is None or self.shape is None or not self.group.oom_killed():
            return None
        given = format_size(self.shape.memory) if self.shape.memory else "its memory"
        return (f"[machine] memory = {given} is less than the server needs with these "
                "settings (its buffer pool and other buffers, and the page cache it reads "
                "through); give the machine more memory, or the server smaller buffers")

    def error_log_tail(self, lines: int = 6) -> str:
        try:
            text = self.error_log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no error log)"
        relevant = [line for line in text if "[ERROR]" in line or "[Warning]" in line] or text
        return " | ".join(line.strip() for line in relevant[-lines:])

    def _config_text(self) -> str:
        # The spec's settings first: every line of knoblab's own comes after them, so that no
        # setting undoes what keeps the sandbox private (the last line wins; the spec checks
        # refuse such settings too, safety.check_sandbox_owned).
        lines = ["[mysqld]", *(f"{name} = {value}" for name, value in self.settings.items())]
        share = self.binary.share()
        if share is not None:  # the build's own error messages and character sets
            lines += [f"lc-messages-dir = {share}", f"character-sets-dir = {share / 'charsets'}"]
        if os.geteuid() == 0:
            lines.append("user = root")
        lines += [
            f"datadir = {self.datadir}",
            f"socket = {self.socket}",
            f"pid-file = {self.dir / 'mysqld.pid'}",
            f"log-error = {self.error_log}",
            # A private tmpdir: on-disk temporary tables must not collide with other programs.
            f"tmpdir = {self.tmpdir}",
            # Files the server writes or reads as root (INTO OUTFILE, LOAD DATA): here only.
            f"secure-file-priv = {self.files}",
            "skip-networking",
            # Data loaded or replayed is untrusted: no table files outside the datadir (DATA
            # / INDEX DIRECTORY), no client files read by the server (LOAD DATA LOCAL), no
            # plugins or functions but those built in, no account above its grants.
            "skip-symbolic-links",
            "local-infile = 0",
            "skip-grant-tables = 0",
            "allow-suspicious-udfs = 0",
            f"plugin-dir = {self.plugins}",
        ]
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
                except pymysql.MySQLError as exc:
                    if exc.args and exc.args[0] in ACCESS_DENIED:
                        # Not a slow start (root refused, or locked): waiting cannot help.
                        raise ServerStartError(
                            f"{self.binary.path.name} refuses knoblab's login as root "
                            f"({exc.args[-1]}): the data's setup or a workload dropped or "
                            "changed root@localhost, which knoblab logs in as; leave root "
                            "alone") from None
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"{self.binary.path.name} not ready after {timeout:.0f} s: "
                    f"{self.error_log_tail()}"
                )
            time.sleep(0.05)


def _said(line: str) -> str:
    """An error log line, from its words on (no timestamp, thread or level), not too long."""
    words = re.sub(r"^.*?\[(ERROR|Warning|Note)\]\s*", "", line.strip())
    words = re.sub(r"^\S*mariadbd: ", "", words).split(". Waiting")[0]
    return words if len(words) <= 160 else words[:157] + "..."


def hurry() -> None:
    """From now on servers are killed instead of shut down (a second Ctrl-C): their data is
    thrown away anyway."""
    global _HURRY
    _HURRY = True
    for sandbox in list(_LIVE):
        if sandbox.process is not None:
            with contextlib.suppress(OSError):
                sandbox.process.kill()


def stop_all() -> None:
    """Stop every sandbox this process started (atexit, and the CLI's signal handling)."""
    for sandbox in list(_LIVE):
        sandbox.stop()


atexit.register(stop_all)


def _start_child(parent: int, group: Group | None) -> None:
    """In the server's process, before it runs: into its control group, and dying with
    knoblab."""
    if group is not None:
        group.join()
    _die_with_parent(parent)


@functools.cache
def hierarchy() -> Hierarchy:
    """This machine's control groups, found once."""
    return Hierarchy.find()


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
    """Stop sandboxes left behind by a knoblab process that no longer exists, and remove
    their folders; how many servers were stopped."""
    home = home or knoblab_home()
    reaped = 0
    for folder, owner in left_behind(home):
        server_pid = owner.get("server_pid")
        if server_pid and alive(server_pid) and owner["defaults_file"] in _cmdline(server_pid):
            os.kill(server_pid, signal.SIGKILL)
            _wait_gone(server_pid)
            reaped += 1
        if owner.get("socket_dir"):
            shutil.rmtree(owner["socket_dir"], ignore_errors=True)
        data_root = Path(owner.get("data_root") or "")
        if data_root.name == f"knoblab-{folder.name}":  # its data on another file system
            shutil.rmtree(data_root, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)
    with contextlib.suppress(UserError):  # no control groups here: none to reap
        reap_groups(hierarchy(), alive)
    return reaped


def _wait_gone(pid: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)


def other_owners(home: Path) -> list[int]:
    """Processes other than this one that have sandboxes running in `home` now."""
    owners = []
    for owner_file in (home / "sandboxes").glob("*/owner.json"):
        try:
            pid = int(json.loads(owner_file.read_text())["owner_pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if pid != os.getpid() and alive(pid):
            owners.append(pid)
    return owners


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
        need_space(root, BASE_BYTES, "an empty data directory of the server")
        building = root / f"base.building-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir(parents=True)
        data = building / "data"
        (building / "tmp").mkdir()
        what = "an empty data directory"
        try:
            out = subprocess.run(binary.install_db_command(data, building / "tmp",
                                                           building / "basedir"),
                                 capture_output=True, text=True, check=False)
            shutil.rmtree(building / "basedir", ignore_errors=True)
            if out.returncode != 0:
                _deleted_while_built(building, what)
                tail = " | ".join((out.stdout + out.stderr).strip().splitlines()[-4:])
                raise UserError(f"initialising a datadir for {binary.path} failed: {tail}")
            (building / "tmp").rmdir()
            with Sandbox(binary, data, {}, home=home, copy=False) as server:
                conn = server.connect()
                try:
                    catalog = read_catalog(conn)
                finally:
                    conn.close()
            catalog.save(building / "catalog.json")
        except (OSError, pymysql.MySQLError, ServerStartError):
            _deleted_while_built(building, what)
            raise
        _deleted_while_built(building, what)
        (data / "ib_buffer_pool").unlink(missing_ok=True)
        building.rename(base)
        (base / ".ready").touch()
        return base


SANDBOX_MARGIN = 64 << 20  # beyond its data: logs, temporary tables, what a measurement writes
BASE_BYTES = 192 << 20  # an empty MariaDB 10.11 data directory takes 114 MB (its redo log)


def folder_bytes(folder: Path) -> int:
    return sum(entry.stat().st_size for entry in folder.rglob("*") if entry.is_file())


def need_space(folder: Path, needed: int, what: str) -> None:
    """NoSpace, with the figures, when the disk of `folder` has less than `needed` free."""
    existing = next(p for p in (folder, *folder.parents) if p.exists())  # not made yet
    free = shutil.disk_usage(existing).free
    if free < needed:
        raise NoSpace(f"{what} needs {safety.format_size_rounded(needed)} on the disk of "
                      f"{folder}, which has {safety.format_size_rounded(free)} free; free "
                      "space there, or set KNOBLAB_HOME to a larger disk")


def _remove_dead_builds(root: Path) -> None:
    """Half-built templates of a knoblab that was killed (called under the lock)."""
    for folder in root.glob("*.building-*"):
        pid = folder.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _check_login(server: Sandbox, key: str) -> None:
    """Every measurement logs in as root: a build that dropped or changed root would leave a
    template no measurement can use."""
    try:
        server.connect(connect_timeout=10).close()
    except pymysql.MySQLError as exc:
        if exc.args and exc.args[0] in ACCESS_DENIED:
            raise UserError(f"building the data {key}: the server refuses knoblab's login as "
                            f"root afterwards ({exc.args[-1]}): the setup dropped or changed "
                            "root@localhost, which knoblab logs in as; leave root alone") \
                from None
        raise


def catalog_for(binary: ServerBinary, home: Path | None = None) -> Catalog:
    return Catalog.load(base_template(binary, home) / "catalog.json")


def derived_template(binary: ServerBinary, key: str, build: Callable[[Sandbox], None],
                     home: Path | None = None, estimated_bytes: int = 0) -> Path:
    """A datadir made from the base template by `build` (e.g. loading a dataset), kept by key.
    Refused up front when the disk cannot hold the estimate; a build that fails (the disk
    filling after all, an SQL error) leaves nothing behind and says why in one line."""
    home = home or knoblab_home()
    base = base_template(binary, home)
    root = home / "templates" / binary.slug
    target = root / key
    with _locked(root / ".lock"):
        if (target / ".ready").exists():
            return target / "data"
        shutil.rmtree(target, ignore_errors=True)
        _remove_dead_builds(root)
        need_space(root, folder_bytes(base / "data") + estimated_bytes + SANDBOX_MARGIN,
                   f"building the data {key}")
        building = root / f"{key}.building-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        server: Sandbox | None = None
        try:
            building.mkdir(parents=True)
            copy_datadir(base / "data", building / "data")
            with Sandbox(binary, building / "data", {}, home=home, copy=False) as server:
                build(server)
                _check_login(server, key)
        except (OSError, pymysql.MySQLError) as exc:
            _deleted_while_built(building, f"the data {key}", base)
            shutil.rmtree(building, ignore_errors=True)
            if shutil.disk_usage(root).free < SANDBOX_MARGIN or (server and server.full) or \
                    getattr(exc, "errno", None) == errno.ENOSPC:
                raise NoSpace(f"the disk of {root} filled up while the data {key} was built; "
                              "free space there, or set KNOBLAB_HOME to a larger disk") from None
            if isinstance(exc, pymysql.MySQLError):
                raise UserError(f"building the data {key} failed: {exc.args[-1]}") from None
            raise
        except BaseException as exc:
            if isinstance(exc, Exception):
                _deleted_while_built(building, f"the data {key}", base)
            shutil.rmtree(building, ignore_errors=True)
            if isinstance(exc, UserError) and server is not None and server.full:
                # A load that failed because its server's disk filled (a dump's client says
                # only "lost connection at line N"): the disk is the cause.
                raise NoSpace(f"the disk of {root} filled up while the data {key} was "
                              "built; free space there, or set KNOBLAB_HOME to a larger "
                              "disk") from None
            raise
        _deleted_while_built(building, f"the data {key}", base)
        (building / "data" / "ib_buffer_pool").unlink(missing_ok=True)
        building.rename(target)
        (target / ".ready").touch()
        return target / "data"


def _deleted_while_built(building: Path, what: str, *sources: Path) -> None:
    """A UserError saying so when the folder being built, or a template it copies, was
    deleted under the build (by hand, or a clean-up of KNOBLAB_HOME): the server's own error
    about missing files would not name the cause."""
    for folder, made in ((building, building), *((s, s / "data") for s in sources)):
        if not made.is_dir():
            shutil.rmtree(building, ignore_errors=True)
            raise UserError(f"{folder} was deleted while {what} was built (by hand, or by a "
                            "clean-up of its folder); nothing was measured with it: start the "
                            "command again to build it anew") from None


# --- the target -----------------------------------------------------------------------------


class SandboxTarget:
    """Sandboxes of one binary: every measurement on a server started for it, from a copy of
    a template holding its data, stopped after."""

    def __init__(self, label: str, binary: ServerBinary, home: Path,
                 shape: Shape | None = None) -> None:
        self.label = label
        self.binary = binary
        self.home = home
        self.shape = shape
        if shape is not None:  # said now, not by every start failing
            self.check_shape(shape)
        self.catalog = catalog_for(binary, home)
        self.templates: dict[str, Path] = {}  # datadir template by data key
        self.run_id = ""  # the run being measured (set by session): named in messages

    @property
    def version(self) -> str:
        return self.binary.short_version

    @property
    def local(self) -> bool:
        return True

    def describe(self) -> dict[str, object]:
        return {"label": self.label, "binary": str(self.binary.path), "version": self.version,
                "version_line": self.binary.version, "compile": compile_info(self.binary),
                "allocator": self.binary.allocator,
                "preload": None if self.binary.preload is None else str(self.binary.preload),
                **({"machine": self.shape.to_json()} if self.shape else {})}

    def check(self, names: list[str], store: object, resuming: str | None) -> None:
        safety.check_sandbox_owned(names, self.catalog)

    def check_workload(self, check_running_server: Callable[[str, Path | None], None],
                       data_keys: set[str]) -> None:
        """A sandbox takes any workload and any number of datasets."""

    def defaults(self, names: list[str]) -> dict[str, str | None]:
        found = {}
        for name in names:
            knob = self.catalog.knobs.get(name)
            if knob is not None:
                found[name] = knob.default_value()
        return found

    def prepare(self, data: Data) -> Path:
        template = derived_template(self.binary, data.key, data.build, self.home,
                                   data.estimated_bytes)
        # Every measurement copies it: a disk that cannot hold one copy is said now, once,
        # not by every measurement failing.
        need_space(self.home, folder_bytes(template) + SANDBOX_MARGIN,
                   "each measurement (a copy of the data directory)")
        self.templates[data.key] = template
        return template

    def data_message(self, label: str) -> str:
        on = f" for {self.label}" if self.label else ""
        return f"data{on}: {label}; built once into a template, then reused"

    def session(self, store: object, run_id: str,
                touched: list[str]) -> contextlib.AbstractContextManager[None]:
        self.run_id = run_id
        return contextlib.nullcontext()  # every sandbox is stopped after its measurement

    def check_shape(self, shape: Shape) -> None:
        """A point's machine ([sweep] "machine.memory" ...): one line before anything runs
        when this machine cannot give it."""
        if shape.datadir is not None:
            places.data_folder(shape.datadir, "[machine] datadir")
        if shape.limited:
            hierarchy().check(shape.limits(hierarchy(), self.home))

    @contextmanager
    def configured(self, settings: Mapping[str, str], data: Data, shape: Shape | None = None
                   ) -> Iterator[tuple[Server, dict[str, object]]]:
        """A server started with the settings that have a start-up option; the others set
        globally before the workload connects."""
        knobs = self.catalog.knobs
        at_start = {k: v for k, v in settings.items() if knobs[k].startup_option}
        after_start = {k: v for k, v in settings.items() if k not in at_start}
        template = self.templates[data.key]
        try:
            sandbox = Sandbox(self.binary, template, at_start, home=self.home,
                              shape=shape or self.shape)
            sandbox.start()
        except OSError:
            if (template.parent / ".ready").exists():
                raise
            # Not a fault of this configuration: the run cannot go on without its data.
            raise UserError(f"the data's template {template.parent} was deleted during the "
                            "run; knoblab stopped, keeping what was measured: go on with "
                            f"knoblab resume {self.run_id}, which builds it again and "
                            "measures the rest") from None
        try:
            set_globals(sandbox.connect, self.catalog, after_start)
            given = shape or self.shape
            yield sandbox, {"copy_seconds": round(sandbox.copy_seconds, 3),
                            "start_seconds": round(sandbox.start_seconds, 3),
                            # where its data lived: a file system's type and journalling
                            # are part of what was measured
                            "filesystem": filesystem(sandbox.datadir),
                            # the machine it was given, kept with every measurement
                            **({"machine": given.to_json()} if given else {})}
        finally:
            sandbox.stop()
