"""The words a run leaves the user with: the command that goes on from where it stopped
(knoblab resume, or knoblab tune for a study's run), and a point's settings in one line."""

from __future__ import annotations

import contextlib
import shlex
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from knoblab.store import RunInfo


def next_command(run: dict[str, Any]) -> str:
    """The command that goes on with a stored run: its resume, or for a run of a tuning
    study (a trial, a validation), the study's own command."""
    info = RunInfo.from_json(run["info"])
    if info.study is None and not searches(run["spec_source"]):
        return f"knoblab resume {run['id']}"
    folder = Path(info.spec_dir) if info.spec_dir else None
    if info.study is None:
        return tune_command(run["spec_source"], folder)
    return tune_command(run["spec_source"], folder, info.study)


def tune_command(source: str, folder: Path | None, study: str | None = None) -> str:
    """knoblab tune with the spec file holding `source` in `folder`, when one still does;
    else the study's name and the spec that made it."""
    found = spec_file(source, folder)
    if found is not None:
        return f"knoblab tune {shlex.quote(str(found))}"
    made = f" (study {study})" if study else ""
    return f"knoblab tune with the spec that made it{made}" + (
        f", in {folder}" if folder is not None and folder.is_dir() else "")


def spec_file(source: str, folder: Path | None) -> Path | None:
    if folder is None or not source:
        return None
    with contextlib.suppress(OSError):
        for path in sorted(folder.glob("*.toml")):
            with contextlib.suppress(OSError, UnicodeDecodeError):
                if path.stat().st_size == len(source.encode()) and path.read_text() == source:
                    return path
    return None


def searches(source: str) -> bool:
    """Whether a stored spec is a search's ([tune]): its runs go on with knoblab tune."""
    try:
        return "tune" in tomllib.loads(source)
    except (tomllib.TOMLDecodeError, TypeError):
        return False


def point_text(settings: Mapping[str, str]) -> str:
    return ", ".join(f"{v}" if len(settings) == 1 else f"{k}={v}" for k, v in settings.items())
