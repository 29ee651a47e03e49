"""Where a test run keeps its data templates, and that they go with it: one folder that the
xdist workers share (knoblab builds each template once, under its lock), in the run's temp
folder, removed when the run ends, passed or failed. What a failed run keeps for a look is its
failed tests' folders (pytest's retention policy, pyproject.toml), not the gigabytes of
templates the next run builds again. A plugin of its own (pyproject.toml's addopts load it), so
that tests/test_leftovers.py runs it in a small suite of its own."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def shared_templates(factory: pytest.TempPathFactory) -> Path:
    """The run's templates folder, made on first use."""
    base = factory.getbasetemp()
    # an xdist worker's base is in its controller's, as `popen-gwN`
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "templates"
    shared.mkdir(exist_ok=True)
    return shared


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):
        return  # a worker's end: the others may still be building or copying templates
    base = session.config._tmp_path_factory._basetemp  # None: the run made no temp folder
    if base is not None:
        shutil.rmtree(base / "templates", ignore_errors=True)
