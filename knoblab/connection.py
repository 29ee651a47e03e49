"""What workloads and servers share, below both: how a server is reached and what a workload
may ask of it.

`Server` is all a workload sees of the server it measures: a sandbox knoblab started, or a
running server whose settings knoblab changed. Nothing here knows which.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import pymysql

# knoblab's own database, where the data it builds lives: its name on every sandbox, and on a
# running server unless [server] database names another (`Server.database`)
DATABASE = "knoblab"
# The server's own databases: never the data measured.
SYSTEM_DATABASES = frozenset({"mysql", "information_schema", "performance_schema", "sys"})
# The server's answers that refuse a login (access denied to a database, to the user, to a
# socket-authenticated one, to a locked account).
ACCESS_DENIED = (1044, 1045, 1698, 4151)
Progress = Callable[[int, int], None]  # (done, total) while data is built


class Server(Protocol):
    """A connected server, configured for one measurement."""

    # knoblab's own database on it, where the data knoblab builds lives (the scan table, a
    # script's tables): DATABASE on a sandbox, [server] database on a running server
    database: str

    def connect(self, database: str | None = None, **kwargs: Any) -> pymysql.Connection: ...

    def global_values(self, names: list[str]) -> dict[str, str]: ...

    def watch(self, expected: Mapping[str, str] | None = None
              ) -> AbstractContextManager[None]:
        """Around one measurement: raises (a UserError saying why) when the measurement left
        the server other than it found it, putting back what it can; or, before it, when the
        server does not hold the point's `expected` settings (as set and read back)."""

    @property
    def pid(self) -> int | None:
        """The server process, when it runs on this machine (for its CPU time and I/O)."""

    @property
    def datadir(self) -> Path | None:
        """Its data directory, when it is on this machine (for evicting files from cache)."""

    @property
    def socket(self) -> Path | None:
        """Its unix socket, when it has one here (for clients that are separate programs)."""

    def drop_cache(self) -> bool:
        """Empty the page cache the server holds in a control group of its own ([machine]),
        touching nothing else; False where it has none."""


def one(cursor: Any) -> tuple[Any, ...]:
    """The one row a query that always returns one row returned."""
    row = cursor.fetchone()
    if row is None:
        raise pymysql.err.InternalError("the server returned no row where one was due")
    return tuple(row)


@dataclass(frozen=True)
class Endpoint:
    """How to reach a running server; what the store keeps of it (no password, ever)."""

    host: str | None = None
    port: int = 3306
    socket: str | None = None
    user: str = "root"
    password_env: str | None = None  # the name of the variable holding the password
    option_file: str | None = None  # a my.cnf-style file with a [client] password
    # For settings only a restart applies: the command that restarts the server (an argv
    # list, run without a shell) and a config file its configuration includes, owned by knoblab.
    restart_command: tuple[str, ...] | None = None
    config_include: str | None = None

    def __post_init__(self) -> None:
        if self.restart_command is not None:  # a list, when read back from the store
            object.__setattr__(self, "restart_command", tuple(self.restart_command))

    def describe(self) -> str:
        where = self.socket or f"{self.host or 'localhost'}:{self.port}"
        return f"{self.user}@{where}"

    def as_dict(self) -> dict[str, Any]:
        """As stored (JSON types), so a stored endpoint compares equal to this one."""
        found = asdict(self)
        if self.restart_command is not None:
            found["restart_command"] = list(self.restart_command)
        return found

    @classmethod
    def from_dict(cls, stored: dict[str, Any]) -> Endpoint:
        """As `as_dict` stored it, with whatever else was stored beside it left out."""
        return cls(**{k: v for k, v in stored.items() if k in cls.__dataclass_fields__})
