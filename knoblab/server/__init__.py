"""Servers under test behind one protocol (`Target`): sandboxes of a binary, or a running server."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from knoblab.connection import Endpoint
from knoblab.errors import UserError
from knoblab.server.binary import find_binary
from knoblab.server.external import RunningTarget
from knoblab.server.sandbox import SandboxTarget
from knoblab.server.shape import Shape
from knoblab.server.target import Data, NoSpace, ServerRefused, Tampered, Target

__all__ = ["Data", "NoSpace", "ServerRefused", "Tampered", "Target", "open_targets"]


def open_targets(binary: str | None, servers: dict[str, str], external: Endpoint | None,
                 home: Path, message: Callable[[str], None], shape: Shape | None = None
                 ) -> tuple[dict[str, Target], dict[str, str]]:
    """The servers to measure, by label, and those left out with their reason. With several
    binaries, one that cannot be used is left out and the others still run; with one, its
    problem is the run's error."""
    if external is not None:
        return {"": RunningTarget(external)}, {}
    if not servers:
        return {"": SandboxTarget("", find_binary(binary), home, shape)}, {}
    targets: dict[str, Target] = {}
    left_out: dict[str, str] = {}
    for label, name in servers.items():
        try:
            targets[label] = SandboxTarget(label, find_binary(name), home, shape)
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
        message(f"server {label}: {target.version} ({target.describe()['binary']})")
    files: dict[Path, list[str]] = {}
    for label, name in servers.items():
        if label in targets:
            files.setdefault(find_binary(name).path.resolve(), []).append(label)
    for path, labels in files.items():
        if len(labels) > 1:
            message(f"warning: {' and '.join(labels)} are the same server ({path}): comparing "
                    "them measures the machine's noise (an A/A check), not two builds")
    return targets, left_out
