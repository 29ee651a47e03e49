"""Random faults at random moments of real runs, each followed by the invariants that must hold.

Each iteration starts a run (on sandboxes, or on the MariaDB on 127.0.0.1:3306), waits a random
time, then sends a random signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGKILL) or a burst of them.
Then: no server and no sandbox folder is left, no setting stays changed on the running server,
`knoblab runs` and `knoblab report` work, and `knoblab resume` finishes the run with exactly one
measurement per planned cell.

CI runs a few iterations; more, by hand (figures in docs/faults.md):
    KNOBLAB_FAULT_ITERATIONS=60 KNOBLAB_FAULT_SEED=1 .venv/bin/python -m pytest tests/test_faults.py
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from knoblab.runner import plan_order
from knoblab.store import Store
from tests import test_external as external
from tests.fakes import SERVER_WIDE, cli_command, cli_env, reaped
from tests.test_crash import _db, _knoblab, _no_sandboxes, _no_servers_soon

pytestmark = [pytest.mark.server, SERVER_WIDE]

ITERATIONS = int(os.environ.get("KNOBLAB_FAULT_ITERATIONS", "2"))
SEED = int(os.environ.get("KNOBLAB_FAULT_SEED", "0"))
SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGKILL]
VALUES, REPETITIONS, RUN_SEED = ["64K", "2M"], 3, 5
SPEC = """\
name = "fault-{i}"
{server}
[dataset]
rows = 3000
[workload]
sql = "SELECT SLEEP(0.15), COUNT(*) FROM dt2"
repetitions = {repetitions}
[sweep]
read_buffer_size = {values}
[statistics]
seed = {seed}
"""
EXTERNAL = ('[server]\nkind = "external"\nhost = "127.0.0.1"\nport = 3306\nuser = "root"\n'
            'database = "{database}"')


def _plan(rng: random.Random) -> dict[str, object]:
    burst = rng.random() < 0.3
    signals = [rng.choice(SIGNALS) for _ in range(rng.randint(2, 5))] if burst \
        else [rng.choice(SIGNALS)]
    return {"external": rng.random() < 0.4, "delay": rng.uniform(0.2, 5.0),
            "signals": signals, "gaps": [rng.uniform(0.0, 0.08) for _ in signals]}


@pytest.fixture(scope="module")
def home(knoblab_home: Path, catalog) -> Path:
    return knoblab_home


@pytest.fixture
def shared_server_put_back(home, tmp_path):
    """Whatever an iteration's checks find, the shared MariaDB gets its settings back, so
    that one failure does not become the next iteration's starting point."""
    originals = external._globals("read_buffer_size")
    yield originals
    store = tmp_path / "s.sqlite"
    if store.exists():
        _knoblab(home, store, "restore", cwd=tmp_path)
    if external._globals("read_buffer_size") != originals:
        conn = external._connect()
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL read_buffer_size = %s", (int(originals["read_buffer_size"]),))
        conn.close()


@pytest.mark.parametrize("iteration", range(ITERATIONS))
def test_a_random_fault_leaves_every_invariant_standing(iteration, home, tmp_path,
                                                        shared_server_put_back,
                                                        running_database):
    rng = random.Random(SEED * 100_003 + iteration)
    plan = _plan(rng)
    originals = shared_server_put_back
    spec = tmp_path / "spec.toml"
    server = EXTERNAL.format(database=running_database) if plan["external"] else ""
    spec.write_text(SPEC.format(i=iteration, server=server,
                                repetitions=REPETITIONS, values=VALUES, seed=RUN_SEED))
    store = tmp_path / "s.sqlite"
    with open(tmp_path / "run.out", "w") as out:
        proc = subprocess.Popen(cli_command(store, "run", str(spec), "--out",
                                            str(tmp_path / "o")),
                                env=cli_env(home), cwd=tmp_path, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    with reaped(proc):
        time.sleep(float(plan["delay"]))  # type: ignore[arg-type]
        for signum, gap in zip(plan["signals"], plan["gaps"], strict=True):  # type: ignore
            if proc.poll() is None:
                proc.send_signal(signum)
            time.sleep(gap)
        code = proc.wait(timeout=120)
    said = (tmp_path / "run.out").read_text()
    what = f"{plan} exited {code}:\n{said[-3000:]}"
    assert "Traceback" not in said, what
    # Died of the signal itself: SIGKILL, or any signal that came before knoblab (still
    # starting Python) had set its handlers, when it had not begun anything yet.
    killed = code < 0
    assert code in (0, 2, 130) or killed, what
    _no_servers_soon(home)

    runs = _knoblab(home, store, "runs", cwd=tmp_path)
    assert runs.returncode == 0 and "Traceback" not in runs.stderr, runs.stderr
    found = _db(store, "SELECT id, status FROM runs") if store.exists() else []
    if found:
        (run_id, status), = found
        report = _knoblab(home, store, "report", run_id, "--out", str(tmp_path / "r"),
                          cwd=tmp_path)
        assert report.returncode in (0, 2) and "Traceback" not in report.stderr, report.stderr
        if status != "done":
            resumed = _knoblab(home, store, "resume", run_id, cwd=tmp_path)
            assert resumed.returncode == 0, f"{what}\nresume: {resumed.stderr[-2000:]}"
        done = Counter(_db(store, "SELECT point_idx, repetition FROM trials "
                                  "WHERE status = 'done'"))
        assert sorted(done) == sorted(plan_order(len(VALUES), REPETITIONS, RUN_SEED)), what
        assert set(done.values()) == {1}, what
        assert _db(store, "SELECT status FROM runs") == [("done",)], what
    elif killed:
        # Killed before the run was stored: the next start cleans up after it.
        rerun = _knoblab(home, store, "run", str(spec), cwd=tmp_path)
        assert rerun.returncode == 0, rerun.stderr[-2000:]
    _no_servers_soon(home)
    _no_sandboxes(home)
    if plan["external"]:
        if killed and store.exists():
            _knoblab(home, store, "restore", cwd=tmp_path)
        assert external._globals("read_buffer_size") == originals, what
        assert not store.exists() or Store(f"sqlite:///{store}").pending_restores() == [], what
