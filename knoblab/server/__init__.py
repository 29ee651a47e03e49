"""Servers under test behind one protocol (`Target`), and the kinds of target, by name: the only
place that lists them.

A kind (`TargetKind`) is what [server] kind names: the keys of [server] it reads, its section
read (an instance), and how its servers are opened for a run. Adding one: a module with its
`Target` and a class following `TargetKind`, and its line in KINDS. The spec, the capture and
the runner go through the registry.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, Protocol

from knoblab import section
from knoblab.connection import DATABASE, SYSTEM_DATABASES, Endpoint
from knoblab.errors import UserError
from knoblab.keys import Key, Keys
from knoblab.server.binary import ServerBinary, find_binary
from knoblab.server.shape import Shape
from knoblab.server.target import Data, NoSpace, ServerRefused, Tampered, Target

__all__ = ["DEFAULT", "KEYS", "KINDS", "Data", "Entry", "NoSpace", "ServerRefused", "Tampered",
           "Target", "TargetKind", "kind_named", "of_section"]

Opened = tuple[dict[str, Target], dict[str, str]]  # the servers by label; those left out, why


class TargetKind(Protocol):
    """A kind of server under test; an instance is a [server] section of that kind, read."""

    kind: ClassVar[str]  # [server] kind = "..."
    described: ClassVar[str]  # what it is, in the line naming every kind
    keys: ClassVar[Keys]  # the keys of [server] only this kind reads
    # An already running server, on its own machine and with its own load: [machine] does not
    # apply, and knoblab capture can read its statements. Else knoblab starts its servers.
    running: ClassVar[bool]

    @property
    def servers(self) -> dict[str, str]:
        """The servers compared, label -> as the spec names it ({} for one)."""

    @property
    def endpoint(self) -> Endpoint | None:
        """Where the running server is reached (None: knoblab starts its servers)."""

    @classmethod
    def from_section(cls, server: dict[str, Any]) -> TargetKind:
        """Its [server] section read and checked; UserError in one line."""

    @classmethod
    def foreign_key(cls, key: str, owner: str) -> str:
        """The line refusing `key`, a key of the kind `owner`, in a section of this kind."""

    def open(self, home: Path, message: Callable[[str], None], shape: Shape | None) -> Opened:
        """The servers to measure, by label, and those left out with their reason; `shape`,
        the machine [machine] gives a server knoblab starts."""


class SandboxKind:
    """Sandboxes of one binary, or of several compared: servers knoblab starts."""

    kind: ClassVar[str] = "sandbox"
    described: ClassVar[str] = "a server knoblab starts"
    keys: ClassVar[Keys] = Keys(
        Key("binary", "The server binary: a name on PATH or a path (mysqld works as mariadbd "
            "does); several, as a list or a table of label = binary (or { path, preload }), "
            "to compare builds or allocators.", "text, a list or a table", '"mariadbd"'))
    running: ClassVar[bool] = False

    def __init__(self, binary: Entry | None, entries: dict[str, Entry]) -> None:
        self.binary = binary  # one server (None: the binary found on PATH, as it is)
        self.entries = entries  # several compared, by label
        # label -> as the spec names it: the binary, and the library preloaded
        self.servers = {label: e.named for label, e in entries.items()}
        self.endpoint: Endpoint | None = None  # knoblab starts them

    @classmethod
    def from_section(cls, server: dict[str, Any]) -> SandboxKind:
        return cls(*_binaries(server.get("binary")))

    @classmethod
    def foreign_key(cls, key: str, owner: str) -> str:
        why = "a sandbox's data lives in knoblab's own database" if key == "database" else \
            "a sandbox is reached on its own private socket"
        return f"[server] {key}: only for kind = \"{owner}\"; {why}"

    def open(self, home: Path, message: Callable[[str], None], shape: Shape | None) -> Opened:
        """With several binaries, one that cannot be used is left out and the others still
        run; with one, its problem is the run's error."""
        from knoblab.server.sandbox import SandboxTarget  # here: a listing needs no sandbox

        if not self.entries:
            one = self.binary or Entry(None, None)
            return {"": SandboxTarget("", one.find(), home, shape)}, {}
        targets: dict[str, SandboxTarget] = {}
        left_out: dict[str, str] = {}
        for label, entry in self.entries.items():
            try:
                targets[label] = SandboxTarget(label, entry.find(), home, shape)
            except UserError as exc:
                left_out[label] = str(exc)
        if not targets:
            raise UserError("no server could be used: " +
                            "; ".join(f"{label}: {why}" for label, why in left_out.items()))
        for label, why in left_out.items():
            message(f"server {label} is left out: {why}")
        if len(targets) == 1:
            message(f"warning: only {next(iter(targets))} is left; nothing to compare it with")
        for label, target in targets.items():
            preload = target.binary.preload
            message(f"server {label}: {target.version} ({target.binary.path}"
                    + (f", with {target.binary.allocator} preloaded: {preload}" if preload
                       else "") + ")")
        files: dict[tuple[Path, Path | None], list[str]] = {}
        for label, target in targets.items():
            binary = target.binary
            files.setdefault((binary.path.resolve(), binary.preload), []).append(label)
        for (path, _), labels in files.items():
            if len(labels) > 1:
                message(f"warning: {' and '.join(labels)} are the same server ({path}): "
                        "comparing them measures the machine's noise (an A/A check), not two "
                        "builds")
        return dict(targets), left_out


class Entry(NamedTuple):
    """A server as [server] binary names it: the binary (None: the one found on PATH) and
    the library it starts with preloaded (an allocator), if any."""

    path: str | None
    preload: str | None

    @property
    def named(self) -> str:
        return (self.path or "") + (f" with {self.preload}" if self.preload else "")

    def find(self) -> ServerBinary:
        return find_binary(self.path).with_preload(self.preload)


_EXAMPLE = ("e.g. binary = \"/usr/sbin/mariadbd\", or to compare servers "
            "binary = {gcc = \"/usr/sbin/mariadbd\", icc = \"/opt/icc/sbin/mariadbd\"}, or "
            "allocators binary = {glibc = \"mariadbd\", jemalloc = {path = \"mariadbd\", "
            "preload = \"jemalloc\"}}")


def _entry(raw: Any, where: str) -> Entry:
    """A name or path, or a table { path = ..., preload = ... }."""
    if isinstance(raw, str) and raw.strip():
        return Entry(raw, None)
    if isinstance(raw, dict) and set(raw) <= {"path", "preload"} and \
            all(isinstance(v, str) and v.strip() for v in raw.values()):
        return Entry(raw.get("path"), raw.get("preload"))
    if isinstance(raw, dict):
        unknown = sorted(set(raw) - {"path", "preload"})
        if unknown:
            raise UserError(f"{where}: unknown key(s) {', '.join(unknown)}; a server is a "
                            f"name or path, or {{ path = ..., preload = ... }}, {_EXAMPLE}")
    raise UserError(f"{where} = {raw!r}: give a name on PATH or a path, {_EXAMPLE}")


def _binaries(raw: Any) -> tuple[Entry | None, dict[str, Entry]]:
    """One server, or several compared: a list of names/paths or a table of label = server
    (a name or path, or { path, preload })."""
    if raw is None:
        return None, {}
    if isinstance(raw, dict) and "path" in raw and set(raw) <= {"path", "preload"}:
        return _entry(raw, "[server] binary"), {}  # one server, with a library preloaded
    if isinstance(raw, str):
        return _entry(raw, "[server] binary"), {}
    if isinstance(raw, list):
        if len(set(map(str, raw))) < len(raw):
            raise UserError("[server] binary: a binary is listed twice; list each server once")
        raw = {str(item): item for item in raw}
    if not isinstance(raw, dict):
        raise UserError(f"[server] binary = {raw!r}: give a name on PATH or a path, {_EXAMPLE}")
    entries = {str(label): _entry(value, f"[server] binary.{label}")
               for label, value in raw.items()}
    if len(entries) < 2:
        raise UserError(f"[server] binary: to compare servers give two or more different "
                        f"binaries, {_EXAMPLE}")
    if len(set(entries.values())) < len(entries):
        raise UserError("[server] binary: a server is listed twice; list each server once")
    return None, entries


class ExternalKind:
    """A running server, reached by host and port or socket: settings changed in place and
    always put back."""

    kind: ClassVar[str] = "external"
    described: ClassVar[str] = "a running server"
    keys: ClassVar[Keys] = Keys(
        Key("host", "The running server's host (not with socket).", "text", '"127.0.0.1"'),
        Key("port", "Its port.", "a whole number", "3306", 1, 65535),
        Key("socket", "Its unix socket, instead of host and port."),
        Key("user", "The account knoblab logs in as; it needs the rights to set global "
            "variables and to create knoblab's database.", "text", '"root"'),
        Key("password_env", "The environment variable holding the password (a password is "
            "never written in a spec)."),
        Key("option_file", "An option file whose [client] section gives the login."),
        Key("restart_command", "The command that restarts the server, as a list of words run "
            "without a shell; with config_include, it lets knoblab apply settings only a "
            "restart applies.", "a list of text"),
        Key("config_include", "A file the server's configuration includes, where knoblab "
            "writes restart-only settings before restart_command."),
        Key("database", "The database knoblab builds its data in, one it owns (a database it "
            "did not make is never dropped).", "text", f'"{DATABASE}"'))
    running: ClassVar[bool] = True

    def __init__(self, endpoint: Endpoint, database: str = DATABASE) -> None:
        self.endpoint = endpoint
        self.database = database  # where knoblab builds its data there, a database it owns
        self.servers: dict[str, str] = {}

    @classmethod
    def from_section(cls, server: dict[str, Any]) -> ExternalKind:
        if "host" in server and "socket" in server:
            raise UserError("[server] give host (and port) or socket, not both")
        command = server.get("restart_command")
        if command is not None and (not isinstance(command, list) or not command or
                                    not all(isinstance(a, str) and a for a in command)):
            raise UserError(f"[server] restart_command = {command!r}: give the command as a "
                            "list of words, run without a shell, e.g. [\"systemctl\", "
                            "\"restart\", \"mariadb\"]")
        include = section.text(server, "config_include", "server", "") or None
        if (command is None) != (include is None):
            raise UserError("[server] restart_command and config_include go together: knoblab "
                            "writes restart-only settings to config_include, then restarts")
        endpoint = Endpoint(
            host=None if "socket" in server else section.text(server, "host", "server",
                                                              "127.0.0.1"),
            port=section.number(server, "port", "server", 3306, int, 1, 65535),
            socket=section.text(server, "socket", "server", "") or None,
            user=section.text(server, "user", "server", "root"),
            password_env=section.text(server, "password_env", "server", "") or None,
            option_file=section.text(server, "option_file", "server", "") or None,
            restart_command=tuple(command) if command else None,
            config_include=include,
        )
        if endpoint.option_file and not _path(endpoint.option_file, "option_file").is_file():
            raise UserError(f"[server] option_file = {endpoint.option_file!r}: no such file")
        return cls(endpoint, _database(section.text(server, "database", "server", DATABASE)))

    @classmethod
    def foreign_key(cls, key: str, owner: str) -> str:
        why = " (the running server is whatever binary it is)" if key == "binary" else ""
        return f"[server] {key}: not for kind = \"external\"{why}; remove it"

    def open(self, home: Path, message: Callable[[str], None], shape: Shape | None) -> Opened:
        from knoblab.server.external import RunningTarget

        return {"": RunningTarget(self.endpoint, self.database)}, {}


def _database(name: str) -> str:
    """[server] database checked: a plain name (it is written into SQL as it is), not one of
    the server's own databases."""
    example = "e.g. database = \"knoblab_bench\""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", name):
        raise UserError(f"[server] database = {name!r}: give a plain name of letters, digits "
                        f"and _ (at most 64, not starting with a digit), {example}")
    if name.lower() in SYSTEM_DATABASES:
        raise UserError(f"[server] database = {name!r}: that is the server's own database; "
                        f"name one knoblab may create and own, {example}")
    return name


def _path(text: str, key: str) -> Path:
    try:
        return Path(text).expanduser()
    except RuntimeError:  # ~user of a user this machine does not have
        raise UserError(f"[server] {key} = {text!r}: no such user's home directory") from None


KINDS: dict[str, type[TargetKind]] = {
    SandboxKind.kind: SandboxKind,
    ExternalKind.kind: ExternalKind,
}
DEFAULT = SandboxKind.kind  # a spec that names no kind
KEYS = functools.reduce(operator.or_, (found.keys for found in KINDS.values()))  # every kind's


def kind_named(server: dict[str, Any]) -> type[TargetKind] | None:
    """The kind a [server] section names (none named: the default); None for a name no kind
    has."""
    name = server.get("kind", DEFAULT)
    return KINDS.get(name) if isinstance(name, str) else None


def of_section(server: dict[str, Any]) -> TargetKind:
    """The [server] section read by the kind it names; a key of another kind is refused in
    this kind's words."""
    if "password" in server:
        raise UserError("[server] password: a password is never written in a spec; name the "
                        "environment variable holding it (password_env = \"MYSQL_PWD\") or an "
                        "option file (option_file = \"~/.my.cnf\")")
    found = kind_named(server)
    if found is None:
        quoted = [f"\"{k.kind}\" ({k.described})" for k in KINDS.values()]
        raise UserError(f"[server] kind = {server.get('kind')!r}: use "
                        f"{', '.join(quoted[:-1])} or {quoted[-1]}")
    for other in KINDS.values():
        for key in other.keys:
            if key in server and key not in found.keys:
                raise UserError(found.foreign_key(key, other.kind))
    return found.from_section(server)
