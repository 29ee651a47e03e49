"""An error nobody foresaw reaches the user as one line, with the details in a log file."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from knoblab import cli, listings


def test_an_unexpected_error_is_one_line_and_a_log_file(tmp_path: Path, monkeypatch,
                                                        capsys: pytest.CaptureFixture[str]):
    monkeypatch.setenv("KNOBLAB_HOME", str(tmp_path / "home"))

    def broken(args, store, home):
        raise RuntimeError("something nobody foresaw\nwith a second line")

    monkeypatch.setattr(listings, "cmd_runs", broken)
    store = f"sqlite:///{tmp_path / 's.sqlite'}"
    # As typed by the user, with a password in a store URL that must not reach the log.
    monkeypatch.setattr(sys, "argv", ["knoblab", "--store",
                                      "postgresql://tuner:hunter2@db/knoblab", "runs"])
    code = cli.main(["--store", store, "runs"])
    err = capsys.readouterr().err
    assert code == 1
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "unexpected error (RuntimeError: something nobody foresaw with a second line)" in err
    log = Path(re.search(r"details are in (\S+)", err).group(1))
    assert log.parent == tmp_path / "home" / "logs"
    text = log.read_text()
    assert "Traceback" in text and "in broken" in text
    assert "hunter2" not in text and "postgresql://tuner:***@db/knoblab" in text


def test_a_password_in_the_traceback_never_reaches_the_log(tmp_path: Path, monkeypatch,
                                                          capsys: pytest.CaptureFixture[str]):
    monkeypatch.setenv("KNOBLAB_HOME", str(tmp_path / "home"))

    def broken(args, store, home):
        raise RuntimeError("lost postgresql://tuner:p@ss word@db/knoblab")

    monkeypatch.setattr(listings, "cmd_runs", broken)
    monkeypatch.setattr(sys, "argv", ["knoblab", "--store",
                                      "postgresql://tuner:p@ss word@db/knoblab", "runs"])
    assert cli.main(["--store", f"sqlite:///{tmp_path / 's.sqlite'}", "runs"]) == 1
    err = capsys.readouterr().err
    log = Path(re.search(r"details are in (\S+)", err).group(1)).read_text()
    assert "ss word" not in log and "p@ss" not in log, log
    assert "ss word" not in err and "p@ss" not in err, err
