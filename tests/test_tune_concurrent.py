"""Two `knoblab tune` workers on one study at once keep its trial budget: trials = 6 is six
trials, not one more per worker that looked while another measured. On a SQLite study (two
processes of one machine) and on PostgreSQL (workers of several machines). The fake kind and
server, in real processes started together."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from tests.test_tune_workers import databases  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[1]
WORKER = """
import sys, time, tomllib
from pathlib import Path
from knoblab import workloads
from knoblab.spec import parse_spec
from knoblab.store import Store
from knoblab.search import tune
from tests import fakes
from tests.test_tune import Quiet

workloads.KINDS[fakes.FakeWorkload.kind] = fakes.FakeWorkload
fakes.SCRIPT.sleep = 0.1  # each trial takes a while: the workers' trials overlap
home, store_url, spec_path, ready, go = sys.argv[1:]
source = Path(spec_path).read_text()
spec = parse_spec(tomllib.loads(source), source=source)
store = Store(store_url)
Path(ready).touch()
while not Path(go).exists():
    time.sleep(0.01)
result = tune(spec, store, Path(home), Quiet(), open_servers=fakes.open_fake)
print("trials", len(result.trials))
"""
SPEC = """name = "together"
[workload]
kind = "fake"
[statistics]
seed = 4
[tune]
trials = 6
batch = 2
validate = 1
{storage}
[tune.knobs]
sort_buffer_size = ["1M", "64M"]
read_buffer_size = ["128K", "8M"]
"""


def _two_workers(tmp_path: Path, store_url: str, storage: str, trials: int = 6,
                 workers_n: int = 2) -> list[str]:
    spec = tmp_path / "together.toml"
    spec.write_text(SPEC.format(storage=storage).replace("trials = 6", f"trials = {trials}"))
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    go = tmp_path / "go"
    go.unlink(missing_ok=True)
    workers, ready = [], []
    for n in range(workers_n):
        ready.append(tmp_path / f"ready-{n}")
        ready[n].unlink(missing_ok=True)
        workers.append(subprocess.Popen(
            [sys.executable, str(script), str(tmp_path), store_url, str(spec), str(ready[n]),
             str(go)], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True))
    deadline = time.monotonic() + 120
    while not all(r.exists() for r in ready):
        assert time.monotonic() < deadline, "the workers did not start"
        assert all(w.poll() is None for w in workers), [w.communicate() for w in workers]
        time.sleep(0.05)
    go.touch()  # both at once
    outputs = [w.communicate(timeout=300)[0] for w in workers]
    for worker, output in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, output
    return outputs


def _complete(study_url: str) -> list[optuna.trial.FrozenTrial]:
    study = optuna.load_study(study_name="together", storage=study_url)
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    done = [t for t in study.trials if t.state in (optuna.trial.TrialState.COMPLETE,
                                                   optuna.trial.TrialState.PRUNED)]
    # Each worker proposes from a stream of its own: none measures another's configuration.
    configs = [tuple(sorted(t.params.items())) for t in done]
    assert len(set(configs)) == len(configs), configs
    return done


@pytest.mark.parametrize("begun", [False, True], ids=["from-the-start", "a-study-begun"])
def test_two_workers_on_a_sqlite_study_keep_its_trial_budget(tmp_path, begun):
    store_url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    if begun:  # a study one worker began alone: the two only share its trials
        _two_workers(tmp_path, store_url, "", trials=2, workers_n=1)
    outputs = _two_workers(tmp_path, store_url, "")
    done = _complete(f"sqlite:///{tmp_path / 'store-tune.sqlite'}")
    assert len(done) == 6, outputs
    owners = {str(t.user_attrs.get("owner")) for t in done if t.user_attrs.get("runs")}
    assert len(owners) >= 2, "both workers measured trials"
    assert all("trials 6" in output for output in outputs), outputs


@pytest.mark.server
def test_two_workers_on_a_postgresql_study_keep_its_trial_budget(tmp_path, databases):  # noqa: F811
    store_url, study_url = databases
    outputs = _two_workers(tmp_path, store_url, f'storage = "{study_url}"')
    done = _complete(study_url.replace("postgresql://", "postgresql+psycopg://"))
    assert len(done) == 6, outputs
    assert all("trials 6" in output for output in outputs), outputs
