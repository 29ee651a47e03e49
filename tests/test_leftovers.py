"""A test run leaves nothing behind in the temp directory, but what a failed test wrote: the
suite's own settings (pyproject.toml, with its plugin tests/temp_policy.py), run on a small
suite of a passing and a failing test, side by side as the real one runs (pytest-xdist)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent

SUITE = '''
import pytest
from tests.temp_policy import shared_templates

@pytest.fixture(scope="session")
def shared(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")  # as the suite's knoblab home: a worker's own
    (home / "settings").write_text("a worker's")
    # the data templates the workers share, as the suite's
    (shared_templates(tmp_path_factory) / "template").write_bytes(b"x" * 4096)
    return home

def test_passes(tmp_path, shared):
    (tmp_path / "passed.txt").write_text("kept?")

def test_fails(tmp_path, shared):
    (tmp_path / "failed.txt").write_text("look here")
    assert {fail}
'''


def _suite(root: Path, tmp: Path, fails: bool) -> subprocess.CompletedProcess[str]:
    suite = root / "suite"
    suite.mkdir(exist_ok=True)
    (suite / "test_small.py").write_text(SUITE.format(fail="False" if fails else "True"))
    env = {**os.environ, "PYTEST_DEBUG_TEMPROOT": str(tmp), "PYTHONPATH": os.pathsep.join(
        filter(None, [str(PROJECT), os.environ.get("PYTHONPATH")]))}  # the suite's plugin
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider",
         "-c", str(PROJECT / "pyproject.toml"), "--rootdir", str(suite), str(suite)],
        cwd=suite, env=env, capture_output=True, text=True, timeout=120)


def _files(tmp: Path) -> list[str]:
    """What the runs under `tmp` left: the tests' files and the shared folders' (a path
    relative to the run's folder, which pytest numbers)."""
    return sorted(str(p.relative_to(tmp)).split("/pytest-", 1)[-1].split("/", 1)[-1]
                  for p in tmp.rglob("*") if p.is_file() and p.name != "lock")


def test_a_passing_run_leaves_nothing_and_a_failing_one_only_what_its_failure_wrote(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    failing = _suite(tmp_path, tmp, fails=True)
    assert failing.returncode == 1, failing.stdout + failing.stderr
    # The failed test's folder stays for a look, with each worker's home; the passed test's
    # is gone, and so are the data templates the workers shared (the real suite's: gigabytes).
    after_failure = _files(tmp)
    assert [f.rsplit("/", 1)[-1] for f in after_failure if f.endswith(".txt")] == ["failed.txt"]
    assert sum(f.endswith("/settings") for f in after_failure) == 2
    assert not any("template" in f for f in after_failure), after_failure
    # A run that passes leaves nothing of its own.
    passing = _suite(tmp_path, tmp, fails=False)
    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert _files(tmp) == after_failure
    # Only the last run that failed is kept: the one before goes.
    again = _suite(tmp_path, tmp, fails=True)
    assert again.returncode == 1
    assert sum(f.endswith("failed.txt") for f in _files(tmp)) == 1
