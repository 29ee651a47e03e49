"""Which server binary runs the experiment, and what it says about itself."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import selectors
import shutil
import signal
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from knoblab.errors import UserError

DEFAULT_BINARIES = ("mariadbd", "mysqld")
SEARCH_DIRS = ("/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin")


@dataclass(frozen=True)
class ServerBinary:
    path: Path
    version: str  # as `--version` prints it, e.g. "Ver 10.11.19-MariaDB-0+deb12u1 for ..."
    flavor: str  # "mariadb" or "mysql"
    # A library the server is started with (LD_PRELOAD): an allocator, jemalloc or tcmalloc
    preload: Path | None = None

    @property
    def allocator(self) -> str | None:
        """The allocator preloaded (jemalloc, tcmalloc, or the library's file name); None:
        the one the build links (glibc's malloc, on Debian's)."""
        if self.preload is None:
            return None
        return next((name for name in ALLOCATORS if name in self.preload.name),
                    self.preload.name)

    @property
    def basedir(self) -> Path:
        return _basedir(self.path)

    def share(self) -> Path | None:
        """The folder of the server's error messages, character sets and system tables'
        SQL: the build's own (an unpacked package or tarball ships it), else the installed
        server's, when that one is of the same release series (its error messages must
        match the build's). None for MySQL, whose servers find their own."""
        if self.flavor != "mariadb":
            return None
        own = self.basedir / "share" / "mysql"
        if (own / "english" / "errmsg.sys").is_file():
            return own
        return _installed_share(self.path, self.short_version)

    def with_preload(self, library: str | None) -> ServerBinary:
        """This server, started with `library` preloaded: "jemalloc", "tcmalloc" or a
        library's path (UserError in one line when it is not there)."""
        if library is None:
            return self
        return ServerBinary(self.path, self.version, self.flavor, find_library(library))

    @property
    def short_version(self) -> str:
        match = re.search(r"Ver\s+(\S+)", self.version)
        return match.group(1) if match else self.version

    @property
    def slug(self) -> str:
        """A directory name unique to this binary build (templates are kept per build)."""
        digest = hashlib.sha256(f"{self.path.resolve()}|{self.version}".encode()).hexdigest()[:10]
        safe = re.sub(r"[^A-Za-z0-9.]+", "-", self.short_version)[:40]
        return f"{safe}-{digest}"

    def install_db_command(self, datadir: Path, tmpdir: Path, basedir: Path) -> list[str]:
        """The command that initialises an empty datadir for this server, the build's own
        install step run on a base folder made for it in `basedir` (`_compose_basedir`). Its
        temporary tables go to a folder of its own: in the shared temp folder, two
        initialisations at once (or any other program's clean-up) remove each other's, and
        the server aborts."""
        if self.flavor == "mariadb":
            tool = _sibling(self.path, ("mariadb-install-db", "mysql_install_db"))
            _compose_basedir(self, basedir)
            command = [
                str(tool), "--no-defaults", f"--datadir={datadir}",
                "--auth-root-authentication-method=normal", "--skip-test-db",
                f"--basedir={basedir}", f"--tmpdir={tmpdir}",
            ]
        else:
            command = [str(self.path), "--no-defaults", "--initialize-insecure",
                       f"--datadir={datadir}", f"--tmpdir={tmpdir}"]
        if os.geteuid() == 0:
            command.append("--user=root")
        return command


def find_binary(requested: str | None = None) -> ServerBinary:
    """The server binary named in the spec (a path or a name on PATH), or the first one found."""
    candidates = [requested] if requested else list(DEFAULT_BINARIES)
    for name in candidates:
        path = _locate(name)
        if path is not None:
            return _describe(path)
    wanted = requested or " or ".join(DEFAULT_BINARIES)
    raise UserError(
        f"server binary {wanted} not found; install it (Debian: apt-get install mariadb-server) "
        "or set [server] binary = \"/path/to/mariadbd\""
    )


def _locate(name: str) -> Path | None:
    if "/" in name:
        try:
            path = Path(name).expanduser()
        except RuntimeError:  # ~user of a user this machine does not have
            return None
        if path.is_dir():
            inside = next((path / n for n in DEFAULT_BINARIES if (path / n).is_file()), None)
            hint = f"; did you mean {inside}?" if inside else \
                "; name the server program itself, e.g. /usr/sbin/mariadbd"
            raise UserError(f"server binary {path} is a folder, not a program{hint}")
        if path.is_file() and not os.access(path, os.X_OK):
            raise UserError(f"server binary {path} is not executable; check the path, or "
                            f"make it executable (chmod +x {path})")
        return path if path.is_file() else None
    found = shutil.which(name) or shutil.which(name, path=os.pathsep.join(SEARCH_DIRS))
    return Path(found) if found else None


VERSION_TIMEOUT = 5.0  # a server prints its version in milliseconds
VERSION_BYTES = 64 << 10  # and in one line


def _describe(path: Path) -> ServerBinary:
    text = _version_text(path)
    if "Ver " not in text:
        raise UserError(f"{path} does not look like a MySQL or MariaDB server "
                        f"(--version printed {text[:80]!r})")
    flavor = "mariadb" if "mariadb" in text.lower() else "mysql"
    return ServerBinary(path=path, version=text.splitlines()[0], flavor=flavor)


def _version_text(path: Path) -> str:
    """What `path --version` prints, read with a cap and a deadline: a program that hangs or
    floods its output is named in one line, and it is killed with all it started."""
    try:
        process = subprocess.Popen([str(path), "--version"], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    except OSError as exc:
        raise UserError(f"server binary {path} cannot be run: {exc.strerror}") from None
    assert process.stdout is not None
    out = bytearray()
    problem = None
    deadline = time.monotonic() + VERSION_TIMEOUT
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    problem = f"did not answer --version within {VERSION_TIMEOUT:.0f} s"
                    break
                if not selector.select(left):
                    continue
                chunk = os.read(process.stdout.fileno(), 1 << 16)
                if not chunk:
                    break
                out += chunk
                if len(out) > VERSION_BYTES:
                    problem = (f"printed more than {VERSION_BYTES >> 10} KB for --version "
                               "(a server prints one line)")
                    break
        if problem is None:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                problem = (f"did not answer --version within {VERSION_TIMEOUT:.0f} s (it "
                           "closed its output but kept running)")
    finally:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        process.stdout.close()
        process.wait()
    if problem is not None:
        raise UserError(f"server binary {path} {problem}; knoblab stopped it. Is it a "
                        "MySQL or MariaDB server? Set [server] binary to one")
    return out.decode(errors="replace").strip()


def _sibling(server: Path, names: tuple[str, ...]) -> Path:
    base = _basedir(server)
    for name in names:
        for folder in (server.parent, base / "bin", base / "scripts"):
            if (folder / name).is_file():
                return folder / name
        found = shutil.which(name)
        if found:
            return Path(found)
    raise UserError(f"{' or '.join(names)} not found next to {server}; install the server's "
                    "full package (Debian: mariadb-server)")


def _basedir(server: Path) -> Path:
    # /usr/sbin/mariadbd -> /usr ; /opt/mariadb/bin/mariadbd -> /opt/mariadb
    return server.resolve().parent.parent


INSTALLED = Path("/usr/sbin/mariadbd")  # Debian's server, whose share folder is borrowed
INSTALLED_SHARE = Path("/usr/share/mysql")


def _series(version: str) -> str:
    """10.11.18-MariaDB-0+deb12u1 -> 10.11"""
    return ".".join(version.split("-")[0].split(".")[:2])


@functools.cache
def _installed_share(path: Path, version: str) -> Path:
    """The installed server's share folder, for a build that ships none, when the two are
    of one release series; else UserError in one line."""
    fix = (f"unpack the build's whole package beside it (its share/mysql folder: Debian's "
           f"mariadb-server-core holds it) so that {_basedir(path) / 'share' / 'mysql'} exists")
    if not (INSTALLED_SHARE / "english" / "errmsg.sys").is_file() or not INSTALLED.is_file():
        raise UserError(f"server binary {path} has no share folder of its own (error "
                        f"messages, character sets) and none is installed; {fix}")
    installed = _describe(INSTALLED).short_version
    if _series(installed) != _series(version):
        raise UserError(f"server binary {path} ({version}) has no share folder of its own, "
                        f"and the installed one is of {installed}, another release series; "
                        f"{fix}")
    return INSTALLED_SHARE


def _compose_basedir(binary: ServerBinary, folder: Path) -> None:
    """A base folder for the build's install step: its server, its share folder, and the
    two helper programs the step calls, the build's own where it ships them, else the
    installed ones (an unpacked mariadb-server-core ships no my_print_defaults)."""
    shutil.rmtree(folder, ignore_errors=True)
    for sub in ("bin", "sbin", "share", "lib/mysql/plugin"):
        (folder / sub).mkdir(parents=True)
    (folder / "sbin" / binary.path.name).symlink_to(binary.path.resolve())
    if binary.path.name != "mariadbd":  # the step looks for sbin/mariadbd
        (folder / "sbin" / "mariadbd").symlink_to(binary.path.resolve())
    share = binary.share()
    assert share is not None  # a MariaDB build
    (folder / "share" / "mysql").symlink_to(share)
    for tool in ("my_print_defaults", "resolveip"):
        own = binary.basedir / "bin" / tool
        found = own if own.is_file() else \
            shutil.which(tool) or shutil.which(tool, path=os.pathsep.join(TOOL_DIRS))
        if found is None:
            raise UserError(f"{tool}, which the install step of {binary.path} calls, is "
                            f"neither beside it nor installed; install it (Debian: "
                            f"apt-get install mariadb-client-core mariadb-server-core)")
        (folder / "bin" / tool).symlink_to(Path(found).resolve())


TOOL_DIRS = ("/usr/bin", "/usr/local/bin")
# Allocators by the name a spec gives them: the libraries Debian's packages install.
ALLOCATORS = {"jemalloc": ("libjemalloc.so.2", "libjemalloc.so.1", "libjemalloc.so"),
              "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4",
                           "libtcmalloc_minimal.so", "libtcmalloc.so")}
PACKAGES = {"jemalloc": "libjemalloc2", "tcmalloc": "libtcmalloc-minimal4"}
LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                "/usr/lib", "/usr/local/lib", "/lib/x86_64-linux-gnu")


def find_library(name: str) -> Path:
    """The library a spec's `preload` names: an allocator by name, or a path."""
    if name in ALLOCATORS:
        for folder in LIBRARY_DIRS:
            for file in ALLOCATORS[name]:
                if (Path(folder) / file).is_file():
                    return Path(folder) / file
        raise UserError(f"preload = \"{name}\": its library ({ALLOCATORS[name][0]}) is not "
                        f"installed; install it (Debian: apt-get install {PACKAGES[name]}), "
                        "or give the library's path")
    path = Path(name).expanduser()
    if "/" not in name:
        raise UserError(f"preload = {name!r}: name an allocator ({', '.join(ALLOCATORS)}) "
                        "or give a library's path, e.g. /usr/lib/x86_64-linux-gnu/"
                        "libjemalloc.so.2")
    if not path.is_file():
        raise UserError(f"preload = {name!r}: no such file; give the path of a shared "
                        "library, or an allocator by name (jemalloc, tcmalloc)")
    try:
        with path.open("rb") as f:
            header = f.read(18)
    except OSError as exc:
        raise UserError(f"preload = {name!r}: cannot be read ({exc.strerror})") from None
    # The loader skips what it cannot preload, with a warning nobody sees: said here instead.
    if header[:4] != b"\x7fELF" or struct.unpack_from("<H", header, 16)[0] != 3:  # ET_DYN
        raise UserError(f"preload = {name!r} is not a shared library (an ELF .so file); "
                        "give the path of one, or an allocator by name (jemalloc, tcmalloc)")
    return path


def compile_info(binary: ServerBinary) -> dict[str, str | None]:
    """What the server says about its build, and the compiler recorded in the ELF file.

    Two builds of one version (GCC vs ICC, -O2 vs -O3) differ only here.
    """
    match = re.search(r"for\s+(\S+)\s+on\s+(\S+)(?:\s+\((.*)\))?", binary.version)
    compilers = _elf_comment(binary.path)
    return {
        "os": match.group(1) if match else None,
        "machine": match.group(2) if match else None,
        "comment": match.group(3) if match and match.group(3) else None,
        "compiler": "; ".join(compilers) if compilers else None,  # None: stripped binary
        "sha256": _digest(binary.path),  # tells two builds of one version apart
        "build_id": _build_id(binary.path),
    }


def _digest(path: Path) -> str | None:
    try:
        with path.open("rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()[:16]
    except OSError:
        return None


def _elf_comment(path: Path) -> list[str]:
    """The strings of a 64-bit little-endian ELF file's .comment section (compiler banners)."""
    raw = _elf_section(path, b".comment")
    texts = [t.decode("utf-8", "replace") for t in (raw or b"").split(b"\0") if t]
    return list(dict.fromkeys(texts))


def _build_id(path: Path) -> str | None:
    """The GNU build id the linker wrote (.note.gnu.build-id): what Debian's debug symbols
    and crash reports name a build by."""
    note = _elf_section(path, b".note.gnu.build-id")
    if note is None or len(note) < 16:
        return None
    name_size, desc_size, _ = struct.unpack_from("<III", note, 0)
    start = 12 + (name_size + 3) // 4 * 4
    return note[start:start + desc_size].hex() or None


def _elf_section(path: Path, wanted: bytes) -> bytes | None:
    """A section of a 64-bit little-endian ELF file, by name (at most 64 KB of it)."""
    try:
        with path.open("rb") as f:
            header = f.read(64)
            if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
                return None
            shoff, = struct.unpack_from("<Q", header, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from("<HHH", header, 0x3A)
            f.seek(shoff)
            table = f.read(shentsize * shnum)
            sections = [struct.unpack_from("<IIQQQQ", table, i * shentsize)
                        for i in range(shnum)]
            _, _, _, _, names_at, names_size = sections[shstrndx]
            f.seek(names_at)
            names = f.read(names_size)
            for name_at, _, _, _, offset, size in sections:
                if names[name_at:names.index(b"\0", name_at)] == wanted:
                    f.seek(offset)
                    return f.read(min(size, 1 << 16))
    except (OSError, struct.error, ValueError, IndexError):
        pass
    return None
