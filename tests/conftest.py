"""Shared fixtures: one private knoblab home per test session, and the real server binary."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from knoblab.server.binary import ServerBinary, find_binary

# The suite's property tests draw the same examples on every run, so that a red run is one a
# change caused; HYPOTHESIS_PROFILE=explore draws new ones (run it to look for new failures).
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@pytest.fixture(scope="session")
def knoblab_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh $KNOBLAB_HOME for the whole session: templates are built once and shared."""
    home = tmp_path_factory.mktemp("knoblab-home")
    os.environ["KNOBLAB_HOME"] = str(home)
    return home


@pytest.fixture(scope="session")
def binary() -> ServerBinary:
    """The MariaDB (or MySQL) server binary from PATH; the tests need a real one."""
    return find_binary()


@pytest.fixture(scope="session")
def catalog(binary: ServerBinary, knoblab_home: Path):
    from knoblab.server.sandbox import catalog_for

    return catalog_for(binary, knoblab_home)
