"""The Dataset protocol: the data a point runs on, built once per key into a template.

Every dataset names its data (`key`: a template datadir is kept per key, so equal keys must
mean equal data), says it in words, builds it on a server and estimates its size on disk; the
other members are capabilities with defaults, which a dataset overrides when it has them (its
own database, files, sweepable parameters, a description for the results, what a running
server would not allow). Whether a measurement changes the data is the workload's business.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol

from knoblab.connection import DATABASE, Progress, Server


class Dataset(ABC):
    """The data one point runs on."""

    # [sweep] names that choose a variant of this data (the scan table's rows, engine,
    # slack_type): verdicts are given per value of these.
    parameters: ClassVar[tuple[str, ...]] = ()

    @property
    @abstractmethod
    def key(self) -> str:
        """Names the data: one template datadir per key (bump a version when the data
        changes)."""

    @abstractmethod
    def label(self, then: str = "") -> str:
        """The data in words, `then` what follows its build; after a build in this process,
        what the build did beyond building it."""

    @abstractmethod
    def build(self, server: Server, progress: Progress | None = None) -> None:
        """Builds the data on a server (once per key, into a template); UserError naming
        what failed."""

    @abstractmethod
    def estimated_bytes(self) -> int:
        """A generous estimate of its size on disk, to refuse a run the disk cannot hold
        before anything is built."""

    # -- capabilities, with their defaults ------------------------------------------------

    @property
    def workload_database(self) -> str | None:
        """The database a workload's connections use, as the data names it: DATABASE for
        knoblab's own, whatever a server calls it (`database_on`); None: the server's
        default."""
        return None

    def database_on(self, server: Server) -> str | None:
        """The database a workload's connections use on `server`: knoblab's own is that
        server's (`Server.database`: a running server's [server] database)."""
        named = self.workload_database
        return server.database if named == DATABASE else named

    @property
    def known_databases(self) -> frozenset[str] | None:
        """The databases the data holds, when known before it is built; None: unknown."""
        return None

    def describe(self, datadir: Path | None) -> dict[str, object] | None:
        """The data for the results (its size on disk when its files are on this machine);
        None when the workload's own description says it all."""
        return None

    def check_running_server(self, where: str) -> None:
        """UserError when the data cannot be put on a running server (not a sandbox)."""
        return None  # by default it can

    def files(self, datadir: Path, own: str = DATABASE) -> list[Path]:
        """Its data files in a datadir (what a cold cache evicts); `own`, knoblab's own
        database there (`Server.database`)."""
        return []

    def varied(self, requested: Mapping[str, str]) -> Dataset:
        """The variant a point runs on, given its requested values (of `parameters`)."""
        return self

    def pinned(self) -> dict[str, object]:
        """What a run's description keeps of the data so that a run is never resumed over
        other data (a dump's file and identity); empty when the spec says it all."""
        return {}


class DatasetKind(Protocol):
    """A kind of data that [dataset] names (`knoblab.datasets.KINDS`)."""

    kind: ClassVar[str]  # its name in the registry and in its description
    # The [dataset] key whose presence names this kind (`dump`); None: the default kind.
    named_by: ClassVar[str | None]

    @classmethod
    def from_spec(cls, section: dict[str, Any], base_dir: Path | None,
                  sweep: Mapping[str, Sequence[Any]] | None = None) -> Dataset:
        """Read and check [dataset] (and the swept parameters of the data); UserError (one
        line) for anything wrong."""
        ...
