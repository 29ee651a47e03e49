"""Two knoblab tune workers on one study through the local PostgreSQL, one killed mid-trial:
the study holds trials from both, and the killed worker's trial is measured again by the
other, not left a hole. Real processes, real sandbox servers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import optuna
import psycopg
import pytest

from tests.fakes import servers_under
from tests.test_store_shared import ADMIN

pytestmark = pytest.mark.server

SPEC = """name = "workers"
[dataset]
rows = 2000
[workload]
kind = "query"
sql = "SELECT COUNT(*) FROM dt2"
cache = "warm"
[statistics]
seed = {seed}
[tune]
trials = 5
batch = 2
rounds = 2
max_rounds = 2
validate = 1
storage = "{study_url}"
[tune.knobs]
read_buffer_size = ["64K", "2M"]
sort_buffer_size = ["64K", "4M"]
"""


@pytest.fixture
def databases():
    """Two fresh databases on the local PostgreSQL: knoblab's store and the Optuna study."""
    names = [f"knoblab_test_{uuid.uuid4().hex[:8]}" for _ in range(2)]
    try:
        admin = psycopg.connect(ADMIN, autocommit=True, connect_timeout=5)
    except psycopg.Error as exc:
        pytest.fail(f"the PostgreSQL on 127.0.0.1:5432 is needed for these tests: {exc}")
    for name in names:
        admin.execute(f"CREATE DATABASE {name}")
    yield [f"postgresql://postgres@127.0.0.1:5432/{name}" for name in names]
    for name in names:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
    admin.close()


def _worker(home: Path, store_url: str, spec: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KNOBLAB_STORE",)}
    env["KNOBLAB_HOME"] = str(home)
    return subprocess.Popen([sys.executable, "-m", "knoblab.cli", "--store", store_url, "tune",
                             str(spec)], env=env, cwd=spec.parent, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _study(url: str) -> optuna.Study:
    return optuna.load_study(study_name="workers",
                             storage=url.replace("postgresql://", "postgresql+psycopg://"))


def _wait(condition, what: str, limit: float = 150.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


@pytest.mark.long
def test_two_workers_make_one_study_and_a_killed_workers_trial_is_measured_again(
        tmp_path, knoblab_home, databases):
    store_url, study_url = databases
    spec = tmp_path / "workers.toml"
    spec.write_text(SPEC.format(seed=5, study_url=study_url))
    first = _worker(knoblab_home, store_url, spec)

    def owned_by(pid: int, state: optuna.trial.TrialState) -> list[optuna.trial.FrozenTrial]:
        try:
            trials = _study(study_url).trials
        except KeyError:  # the study is not created yet
            return []
        told = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
        return [t for t in trials if (t.state in told if state in told else t.state == state)
                and str(t.user_attrs.get("owner", "")).endswith(f":{pid}") and
                (state not in told or t.user_attrs.get("runs"))]

    # The first worker measures a trial, and is killed while measuring its next one.
    _wait(lambda: owned_by(first.pid, optuna.trial.TrialState.COMPLETE), "a first trial")
    second = _worker(knoblab_home, store_url, spec)
    # Frozen (SIGSTOP) while its trial is read, so that it cannot tell that trial between
    # the reading and the kill; a statement sent just before is given time to land.
    while True:
        _wait(lambda: owned_by(first.pid, optuna.trial.TrialState.RUNNING), "a running trial")
        first.send_signal(signal.SIGSTOP)
        time.sleep(0.3)
        running = owned_by(first.pid, optuna.trial.TrialState.RUNNING)
        if running:
            break
        first.send_signal(signal.SIGCONT)
    killed = running[0]
    first.send_signal(signal.SIGKILL)
    first.wait()

    output, _ = second.communicate(timeout=400)
    assert second.returncode == 0, output
    trials = _study(study_url).trials
    done = [t for t in trials if t.state in (optuna.trial.TrialState.COMPLETE,
                                             optuna.trial.TrialState.PRUNED)]
    owners = {str(t.user_attrs.get("owner")).rpartition(":")[2] for t in done}
    assert {str(first.pid), str(second.pid)} <= owners, "trials from both workers"
    assert len(done) == 5
    # The killed trial is failed, not left running, and its configuration measured after it.
    cut = next(t for t in trials if t.number == killed.number)
    assert cut.state == optuna.trial.TrialState.FAIL
    again = [t for t in done if t.number > cut.number and t.params == cut.params]
    assert again and str(again[0].user_attrs["owner"]).endswith(f":{second.pid}")
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    assert "Recommended" in output or "keep" in output
    written = tmp_path / "knoblab-results" / "study-workers"
    document = json.loads((written / "tune.json").read_text())
    assert len(document["trials"]) == 5 and (written / "search.png").exists()
    _wait(lambda: not servers_under(knoblab_home), "the sandboxes to stop", limit=30)
