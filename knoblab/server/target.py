"""The Target protocol: a server under test, as the runner sees it.

Two kinds: sandboxes of a binary (`knoblab.server.sandbox.SandboxTarget`: a fresh server
started for every measurement) and a running server (`knoblab.server.external.RunningTarget`:
settings changed in place and always put back). The runner drives either through this protocol
alone: check what it allows, prepare the data, configure it for one measurement and hand the
workload a connected `Server`, read back what it applied.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from knoblab.catalog import Catalog
from knoblab.connection import Server
from knoblab.errors import UserError
from knoblab.server.shape import Shape


class ServerRefused(UserError):
    """The server would not start (or restart) with a configuration: that point fails, and
    the run goes on with the others."""


class NoSpace(UserError):
    """Not enough disk for what is about to be written: said with the figures, before a
    byte is written; for a measurement, it fails that measurement alone."""


class Tampered(UserError):
    """A measurement left the server other than it found it (a setting changed, its data
    dropped, root locked out): that measurement fails, with the reason, and the run goes on."""


@dataclass(frozen=True)
class Data:
    """The data a measurement runs on: its key, how to build it, whether measuring changes
    it (then a running server gets it rebuilt before every measurement), and an estimate of
    its size on disk."""

    key: str
    build: Callable[[Server], None]
    changed_by_measuring: bool
    estimated_bytes: int = 0


class Target(Protocol):
    """One server under test."""

    label: str  # "" when only one server is measured
    catalog: Catalog

    @property
    def version(self) -> str: ...

    @property
    def local(self) -> bool:
        """Whether its memory is this machine's (the memory budget applies)."""

    def describe(self) -> dict[str, object]:
        """What the results list of it: version, build or endpoint."""

    def check(self, names: list[str], store: Any, resuming: str | None) -> None:
        """What this server allows for these settings; UserError before anything runs."""

    def check_workload(self, check_running_server: Callable[[str, Path | None], None],
                       data_keys: set[str]) -> None:
        """What this server allows for the workload and its data."""

    def defaults(self, names: list[str]) -> dict[str, str | None]:
        """The baseline points are compared with: compiled-in defaults, or values now in force."""

    def prepare(self, data: Data) -> Path | None:
        """Builds the data once (or finds it built); where its files are, when here."""

    def data_message(self, label: str) -> str:
        """Where the data lives, for the progress display."""

    def session(self, store: Any, run_id: str,
                touched: list[str]) -> AbstractContextManager[None]:
        """Around a whole run: whatever it changes is put back on the way out."""

    def check_shape(self, shape: Shape) -> None:
        """One line when this server cannot be given the machine `shape` ([machine])."""

    def configured(self, settings: Mapping[str, str], data: Data, shape: Shape | None = None
                   ) -> AbstractContextManager[tuple[Server, dict[str, Any]]]:
        """A server running with `settings` (and the data `data`), for one measurement, with
        what configuring it cost (stored beside the measurement); `shape`, the machine the
        point gives its sandbox ([machine], swept or not; a running server takes none)."""
