"""A disk too small, or filling up: said up front with the figures, or as failed
measurements with a clear message, and never a half-made template or sandbox left behind.
Each test gives knoblab a home on a small tmpfs of its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.server

SPEC = """\
name = "disk"
[dataset]
rows = {rows}
[workload]
sql = "SELECT SLEEP(0.2), COUNT(*) FROM dt2"
repetitions = 3
[sweep]
read_buffer_size = ["64K", "2M"]
"""


def _run(home: Path, tmp_path: Path, rows: int, *, wait: bool = True):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC.format(rows=rows))
    command = [sys.executable, "-m", "knoblab.cli", "--store",
               f"sqlite:///{tmp_path / 's.sqlite'}", "run", str(spec), "--out",
               str(tmp_path / "out")]
    env = {**os.environ, "KNOBLAB_HOME": str(home)}
    if wait:
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600,
                              check=False)
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _nothing_half_made(home: Path) -> None:
    assert list(home.glob("templates/*/*.building-*")) == []
    assert list(home.glob("sandboxes/*")) == []


def test_a_dataset_the_disk_cannot_hold_is_refused_before_it_is_built(tmpfs, tmp_path):
    home = tmpfs(400)
    out = _run(home, tmp_path, rows=10**12)
    assert out.returncode == 2, out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert re.search(r"building the data scan-table-\w+ needs [\d.]+T on the disk of .*, "
                     r"which has [\d.]+[KMG] free", line), line
    assert "Traceback" not in out.stderr
    _nothing_half_made(home)


def test_a_disk_that_holds_the_data_but_not_a_copy_is_refused_up_front(tmpfs, tmp_path):
    home = tmpfs(300)  # the empty datadir (114M) and the data's template fit, a copy not
    out = _run(home, tmp_path, rows=1000)
    assert out.returncode == 2, out.stderr
    assert "each measurement (a copy of the data directory) needs" in out.stderr
    assert "Traceback" not in out.stderr
    _nothing_half_made(home)


def test_a_disk_filling_during_the_run_fails_measurements_and_leaves_nothing(tmpfs,
                                                                             tmp_path):
    home = tmpfs(520)
    run = _run(home, tmp_path, rows=1000, wait=False)
    try:
        # Once measuring, something else fills the disk.
        deadline = time.monotonic() + 120
        while not list(home.glob("sandboxes/*/data")):
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.05)
        with open(home / "filler", "wb") as filler:
            try:
                while os.statvfs(home).f_bavail * os.statvfs(home).f_frsize > 8 << 20:
                    filler.write(b"\0" * (1 << 20))
                    filler.flush()
            except OSError:
                pass  # full: knoblab's copy took the rest
        stdout, stderr = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 2, stderr
    assert "Traceback" not in stderr
    assert re.search("every configuration failed|measurements failed",
                     stderr.strip().splitlines()[-1])
    assert "free space there, or set KNOBLAB_HOME to a larger disk" in stdout + stderr
    _nothing_half_made(home)


def test_a_datadir_copy_is_byte_for_byte_with_its_zeros_allocated_not_left_out(tmp_path):
    """A sandbox's copy writes only the blocks that hold something; its zeros are allocated
    (as InnoDB allocates its files), so that the server never writes into a hole."""
    from knoblab.server.datadir import copy_datadir

    source = tmp_path / "source"
    (source / "db").mkdir(parents=True)
    log = bytearray(5 * 65536 + 1234)  # mostly zeros, as a fresh redo log
    log[100:105] = b"\x01\x02\x03\x04\x05"
    log[3 * 65536 - 2: 3 * 65536 + 2] = b"edge"  # across two blocks
    log[-1] = 9  # in the short last block
    (source / "ib_logfile0").write_bytes(bytes(log))
    (source / "db" / "t.ibd").write_bytes(os.urandom(70000))
    (source / "empty").write_bytes(b"")
    (source / "ib_buffer_pool").write_text("warm")
    copy_datadir(source, tmp_path / "copy")
    for name in ("ib_logfile0", "db/t.ibd", "empty"):
        assert (tmp_path / "copy" / name).read_bytes() == (source / name).read_bytes(), name
    copied = (tmp_path / "copy" / "ib_logfile0").stat()
    assert copied.st_size == len(log) and copied.st_blocks * 512 >= len(log)
    assert not (tmp_path / "copy" / "ib_buffer_pool").exists()
