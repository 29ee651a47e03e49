"""knoblab tune's cheap trials and careful claims: a setting changed in place checked against
a fresh start, the interval of a drifting series, and validations beside other load."""

from __future__ import annotations

import math
import random
import subprocess
import sys

import pytest

from knoblab.records import TrialOutcome
from knoblab.search import proof
from knoblab.store import Store
from tests import fakes, test_tune
from tests.test_tune import Quiet, _spec, _tune

# The fake kind and server of test_tune, and its store.
fake_kind = test_tune.fake_kind
store = test_tune.store


def test_a_setting_whose_in_place_value_differs_from_a_start_is_searched_with_starts(
        store, tmp_path):
    # The fake server halves sort_buffer_size set in place: a candidate changing it cannot
    # share a start with the baseline; read_buffer_size can.
    fakes.SCRIPT.halved_in_place = {"sort_buffer_size"}
    listener = Quiet()
    result = _tune(store, tmp_path, _spec(trials=10, validate=1), listener)
    said = [line for line in listener.lines if "set in place reads back" in line]
    assert len(said) == 1 and said[0].startswith("sort_buffer_size = ")
    assert "server start of their own" in said[0]
    assert any("warm trials" in line and "changes sort_buffer_size gets starts of its own"
               in line for line in listener.lines)
    measured = [t for t in result.trials if t.state in ("scored", "pruned")]
    cold = [t for t in measured if "sort_buffer_size" in t.changes]
    warm = [t for t in measured if "sort_buffer_size" not in t.changes]
    assert cold, "the sampler changed the sort buffer in some trials"
    for t in cold:  # a run of its own per step: the baseline and it, two starts a step
        for run in t.runs:
            assert {m.point_idx for m in store.trials(run)} == {0, 1}
            assert store.run(run)["info"]["design"]["name"] == "restarts"
        assert len(t.ratios) == 2 * len(t.runs)
    for t in warm:
        assert all(store.run(run)["info"]["design"]["name"] == "blocked" for run in t.runs)
    fakes.SCRIPT.halved_in_place = set()
    other = tmp_path / "other"
    other.mkdir()
    again = Quiet()
    _tune(Store(f"sqlite:///{other / 'store.sqlite'}"), other, _spec(trials=3, validate=1),
          again)
    assert not any("set in place reads back" in line for line in again.lines)


def _ar1(rng: random.Random, n: int, rho: float) -> list[float]:
    x, out = 0.0, []
    for _ in range(n + 30):
        x = rho * x + rng.gauss(0.0, 1.0) * math.sqrt(1 - rho * rho)
        out.append(x)
    return out[30:]


def _coverage(rho: float, n: int, widened: bool, draws: int = 1500) -> float:
    """How often a 95% interval of the gain holds the true one (0: the mean log-ratio is 0)
    when the per-start ratios drift as a first-order autoregressive series."""
    from scipy import stats as sps

    rng = random.Random(f"{rho} {n}")
    held = 0
    for _ in range(draws):
        ratios = [0.05 * v for v in _ar1(rng, n, rho)]
        if widened:
            low, high = TrialOutcome(1, {}, {}, "scored", 0.0, ratios, ()).interval() or (0, 0)
        else:  # the t-interval on independent ratios, as before
            mean = sum(ratios) / n
            sd = math.sqrt(sum((r - mean) ** 2 for r in ratios) / (n - 1))
            half = float(sps.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
            low, high = math.expm1(-(mean + half)), math.expm1(-(mean - half))
        held += low <= 0.0 <= high
    return held / draws


def test_the_gains_interval_widens_for_drift_between_starts():
    # Starts minutes apart drift together: at a lag-1 correlation of 0.6, 20 starts, the
    # independent t-interval holds the truth about three times in four.
    before, now = _coverage(0.6, 20, widened=False), _coverage(0.6, 20, widened=True)
    assert before < 0.80 and now >= 0.82 and now - before >= 0.08, (before, now)
    # No drift: the interval stays a 95% one.
    assert _coverage(0.0, 12, widened=True) >= 0.93


def test_a_few_rounds_with_one_slow_are_not_read_as_drift():
    # A validation's five rounds of a four-fold gain, the last slowed by a busy moment: too
    # few to tell a drift from one bad round, so the interval is the plain t-interval, which
    # stays clear of zero (widened for the apparent drift, it reached past it).
    from scipy import stats as sps

    ratios = [-1.45, -1.40, -1.42, -1.30, -0.75]
    low, high = TrialOutcome(1, {}, {}, "scored", 0.0, ratios, ()).interval(0.99) or (0, 0)
    n, mean = len(ratios), sum(ratios) / len(ratios)
    sd = math.sqrt(sum((r - mean) ** 2 for r in ratios) / (n - 1))
    half = float(sps.t.ppf(0.995, n - 1)) * sd / math.sqrt(n)
    assert (low, high) == pytest.approx((math.expm1(-(mean + half)), math.expm1(-(mean - half))))
    assert low > 0.0


@pytest.fixture
def busy_elsewhere():
    """A program outside knoblab's process tree keeping a core busy (orphaned at once)."""
    found = subprocess.run(
        ["sh", "-c", f"timeout 120 {sys.executable} -c 'while 1: pass' >/dev/null 2>&1 & "
                     "echo $!"], capture_output=True, text=True, check=True)
    pid = int(found.stdout.strip())
    yield pid
    subprocess.run(["kill", str(pid)], check=False)


def test_a_validation_beside_other_load_says_so_and_is_measured_again(
        store, tmp_path, monkeypatch, busy_elsewhere):
    monkeypatch.setattr(proof, "BUSY_BESIDE", 0.25)
    fakes.SCRIPT.sleep = 0.05  # long enough for the load to be seen
    listener = Quiet()
    result = _tune(store, tmp_path, _spec(trials=4, validate=1), listener)
    warned = [line for line in listener.lines if "ran beside other programs" in line]
    assert warned and "measuring it again" in warned[0]
    assert result.validations
    v = result.validations[0]
    assert v.others_load is not None and v.others_load > 0.25
    assert store.run(v.run_id)["name"].endswith(", again")
    names = [r["name"] for r in store.list_runs(limit=None)]
    first = store.run(v.run_id)["name"].removesuffix(", again")
    assert first in names, "the first validation's run is kept in the store too"


TUNE_REPLAY = """\
name = "screened"
[dataset]
dump = "shop.sql"
[workload]
kind = "replay"
log = "slow.log"
[statistics]
seed = 5
[tune]
trials = 6
validate = 1
batch = 3
screen = "50%"
[tune.knobs]
sort_buffer_size = ["32K", "8M"]
read_buffer_size = ["16K", "4M"]
"""


@pytest.mark.server
@pytest.mark.long
def test_a_replay_is_screened_on_part_of_its_capture_and_claimed_on_the_whole(
        knoblab_home, tmp_path):
    import json
    import os

    import optuna

    from tests.test_replay import _case

    statements = [(thread, f"SELECT a FROM t WHERE id = {i}") for i in range(1, 61)
                  for thread in (3, 4, 5, 6)]
    spec = _case(tmp_path, statements)
    spec.write_text(TUNE_REPLAY)
    env = {k: v for k, v in os.environ.items() if k != "KNOBLAB_STORE"}
    env["KNOBLAB_HOME"] = str(knoblab_home)
    done = subprocess.run(
        [sys.executable, "-m", "knoblab.cli", "--store", f"sqlite:///{tmp_path / 's.sqlite'}",
         "tune", str(spec), "--out", str(tmp_path / "out")],
        env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    store = Store(f"sqlite:///{tmp_path / 's.sqlite'}")
    study = optuna.load_study(study_name="screened",
                              storage=f"sqlite:///{tmp_path / 's-tune.sqlite'}")
    measured = [t for t in study.trials if t.user_attrs.get("state") in ("scored", "pruned")]
    assert measured
    for trial in measured:
        runs = trial.user_attrs["runs"]
        sessions = [store.run(r)["info"]["workload"].get("slice") for r in runs]
        # The first measurement replays half of the sessions; any later one, all of them.
        assert sessions[0] == {"share": 0.5} and not any(sessions[1:])
        screened_only = len(runs) == 1
        assert trial.user_attrs.get("screened") == 1
        assert (trial.user_attrs.get("fidelity") or "").startswith("50% of the sessions") \
            == screened_only
    result = json.loads((tmp_path / "out" / "tune.json").read_text()) \
        if (tmp_path / "out" / "tune.json").exists() else None
    assert result is not None
    # What is claimed comes from the whole capture: no validation replays a part of it.
    checks = [r for r in store.list_runs(limit=None) if "validation" in r["name"]
              or "confirmed" in r["name"] or "reduced" in r["name"]]
    assert all(not store.run(r["id"])["info"]["workload"].get("slice") for r in checks)


@pytest.mark.long
def test_an_undecided_validation_gets_the_time_the_checks_after_it_did_not_need(
        fake_kind, tmp_path, monkeypatch):
    """A study's budget keeps a part for the reduction and the confirmation, which run only
    for a candidate shown to help. When no validation is, that part goes to the ones their
    share stopped undecided: the same run goes on, its sequential test where it stopped
    (here a placebo: it goes on and is still not called better)."""
    import re
    import tomllib

    from knoblab.runner import loop as runner_loop
    from knoblab.spec import parse_spec

    monkeypatch.setattr(runner_loop, "FUTILE_FROM", 1000)  # the budget, not futility, stops it
    # 1 s a measurement: the validation's share (at most 0.6 × 60 s less the search's) cannot
    # hold the ceiling's 20 rounds (40 s at the least), and holds the 3 it needs to begin,
    # with room for slow rounds on a busy machine
    monkeypatch.setattr(fakes, "SCRIPT", fakes.Script(model=lambda s: 1.0, spread=0.3,
                                                      sleep=1.0))
    source = ('name = "search"\n[server]\n[workload]\nkind = "fake"\n[statistics]\nseed = 3\n'
              '[tune]\ntrials = 4\nvalidate = 1\nbudget = "60s"\n[tune.knobs]\n'
              'sort_buffer_size = ["1M", "64M"]\nread_buffer_size = ["128K", "8M"]\n')
    listener = Quiet()
    store_ = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    result = _tune(store_, tmp_path, parse_spec(tomllib.loads(source), source=source), listener)
    said = [line for line in listener.lines if "stopped undecided after" in line]
    assert len(said) == 1 and "going on for" in said[0], listener.lines
    first = int(re.search(r"after (\d+) rounds", said[0]).group(1))
    (v,) = result.validations
    assert v.rounds > first  # the same run, measured further
    assert store_.run(v.run_id)["info"]["stopped"]["reason"] in ("budget", "ceiling")
    assert v.verdict != "better" and result.recommended is None
