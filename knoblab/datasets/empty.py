"""No data at all: the server as it starts (a replay given no dump runs on it)."""

from __future__ import annotations

from dataclasses import dataclass

from knoblab.connection import Progress, Server
from knoblab.datasets.base import Dataset


@dataclass(frozen=True)
class EmptyServer(Dataset):
    """Nothing built: a template of a server as it starts, kept under its workload's name."""

    made_for: str  # the workload kind whose measurements start from it

    @property
    def key(self) -> str:
        return f"{self.made_for}-empty"

    def label(self, then: str = "") -> str:
        return f"an empty server{then}"

    def build(self, server: Server, progress: Progress | None = None) -> None:
        """Nothing to build."""

    def estimated_bytes(self) -> int:
        return 0
