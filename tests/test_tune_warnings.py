"""knoblab tune warns before its first trial about a setting it searches but never recommends
(its cost lies outside what a sandbox benchmark sees), and goes on: the user may want to see
its effect. Real sandbox server, through the command; the search is stopped once warned."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from knoblab.recommend import UNSEEN_COST
from knoblab.search.space import auto_space
from tests.fakes import cli_command, reaped
from tests.test_tune_bad_input import SPEC

pytestmark = pytest.mark.server


def _until_warned(tmp_path: Path, env: dict[str, str], knobs: str) -> tuple[int, list[str]]:
    """What `knoblab tune` printed until its first warning about a never-recommended
    setting (then it is stopped as Ctrl-C stops it), or until it ended without one; and its
    exit code."""
    spec = tmp_path / "search.toml"
    spec.write_text(SPEC.format(knobs=knobs, tune="", tie="", server=""))
    err = tmp_path / "stderr.txt"
    with err.open("w") as stderr:
        proc = subprocess.Popen(cli_command(tmp_path / "s.sqlite", "tune", str(spec)),
                                stdout=subprocess.DEVNULL, stderr=stderr, env=env,
                                cwd=tmp_path, text=True)
    with reaped(proc):
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if "never recommended" in err.read_text():
                proc.send_signal(signal.SIGINT)
                break
            time.sleep(0.05)
        proc.wait(timeout=120)
    return proc.returncode, err.read_text().splitlines()


def test_a_setting_never_recommended_is_warned_about_before_the_first_trial(
        tmp_path: Path, env: dict[str, str]) -> None:
    code, lines = _until_warned(tmp_path, env, 'thread_cache_size = { values = [8, 64] }\n'
                          'sort_buffer_size = ["64K", "4M"]')
    warned = [i for i, line in enumerate(lines) if "never recommended" in line]
    assert len(warned) == 1, lines
    line = lines[warned[0]]
    assert line.startswith("warning: thread_cache_size will be searched but never recommended")
    assert UNSEEN_COST["thread_cache_size"] in line and "remove it from [tune.knobs]" in line
    assert not any(" trial " in f" {text}" for text in lines[:warned[0]]), lines
    assert "Traceback" not in "\n".join(lines)
    assert code == 130, "a warning, not a refusal: the search went on until stopped"


def test_auto_leaves_out_the_settings_never_recommended(catalog) -> None:
    space, left_out = auto_space(catalog, 2 << 30, durability=False)
    assert not set(space.names) & set(UNSEEN_COST)
    assert f"table_open_cache (never recommended: {UNSEEN_COST['table_open_cache']})" in \
        left_out
