"""Who a run belongs to: a process on a host, alive or gone. A run left "running" by a process
now gone was killed; reading that needs nothing but the process table, so that `knoblab runs`
lists the store without the machinery that measures."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from knoblab.vocabulary import RunStatus


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


def run_state(run: dict[str, Any]) -> str:
    """The run's status, with "killed" for a run left "running" by a process now gone (its
    info's owner: this host's process id)."""
    owner = (run["info"] or {}).get("owner") or {}
    if run["status"] == RunStatus.RUNNING and owner.get("host") == socket.gethostname() and \
            not alive(int(owner.get("pid") or 0)):
        return RunStatus.KILLED
    return str(run["status"])


def left_behind(home: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The sandbox folders under `home` whose owner (the knoblab that made them) is gone,
    each with its owner.json ({} when killed before writing it), and the templates such an
    owner left half-built; never one whose owner is alive, or that names none (an older
    knoblab's, still being made)."""
    found: list[tuple[Path, dict[str, Any]]] = [
        (folder, {}) for folder in (home / "templates").glob("*/*.building-*")
        if (pid := folder.name.rsplit("-", 1)[-1]).isdigit() and not alive(int(pid))]
    for folder in (home / "sandboxes").glob("*"):
        named = folder.name.rsplit("-", 1)[-1]
        try:
            owner = json.loads((folder / "owner.json").read_text())
        except (OSError, ValueError):
            owner = {}
        owner_pid = int(owner.get("owner_pid") or (named if named.isdigit() else 0))
        if owner_pid and not alive(owner_pid):
            found.append((folder, owner))
    return found
