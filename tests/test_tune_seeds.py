"""Each worker and each invocation of a study proposes configurations of its own: workers on
one study, and a study stopped and taken up again, measure no configuration twice unless one
was asked for (the baseline, a trial cut short and queued again). The ask/tell loop on a SQLite
study with a fake measurement: no server."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import optuna
import pytest

from knoblab.records import Dimension, Space, TrialOutcome
from knoblab.search.loop import Measuring, ask_and_tell
from knoblab.search.options import TuneOptions, goal_for
from knoblab.search.study import Turn, open_study, params_for, tell
from knoblab.spec import parse_spec
from knoblab.store import sqlite_url
from tests.test_tune import Quiet, fake_kind  # noqa: F401 - the fake kind, autouse

K, M = 1 << 10, 1 << 20
SPACE = Space((Dimension("sort_buffer_size", 32 * K, 64 * M, 1, True),
               Dimension("read_buffer_size", 8 * K, 2 * M, 4096, True)))
BASELINE = {"sort_buffer_size": str(2 * M), "read_buffer_size": str(128 * K)}


def _spec(sampler: str = "tpe"):
    source = ('name = "seeds"\n[workload]\nkind = "fake"\n[statistics]\nseed = 3\n'
              f'[tune]\nsampler = "{sampler}"\n[tune.knobs]\n'
              'sort_buffer_size = ["32K", "64M"]\nread_buffer_size = ["8K", "2M"]\n')
    return parse_spec(tomllib.loads(source), source=source)


class Worker:
    """One invocation of knoblab tune as far as proposals go: it opens the study (as tune
    does: in a turn, the baseline queued first) and runs the ask/tell loop, each trial
    "measured" at once with a score that depends on its configuration alone."""

    def __init__(self, url: str, space: Space = SPACE, baseline=BASELINE, sampler="tpe"):
        self.spec = _spec(sampler)
        assert self.spec.tune is not None
        self.options = TuneOptions.from_spec(self.spec.tune, self.spec.name)
        self.space, self.baseline, self.listener = space, baseline, Quiet()
        self.goal = goal_for(self.options, self.spec.workload)  # its gains' words
        self.turn = Turn(url)
        self.measured: list[dict[str, str]] = []
        self.stop_at: int | None = None
        self.cut: dict[str, str] | None = None
        with self.turn():
            self.study = open_study(self.options, self.spec, space, url, {"cpu": "fake"})
            if not self.study.trials:
                self.study.enqueue_trial(params_for(space, baseline))

    def run(self, trials: int) -> str:
        self.options = dataclasses.replace(self.options, trials=trials, budget=None)
        return ask_and_tell(self.study, self.turn, self)  # type: ignore[arg-type]

    # What the loop asks of its search: room for new trials, their admission, a step.
    def room(self, active: list[Measuring]) -> int:
        return 0 if active else 1

    def admit(self, study, trials, earlier) -> list[Measuring]:
        admitted = []
        for trial in trials:
            config = self.space.config(trial.params)
            changes = {k: v for k, v in config.items() if v != self.baseline[k]}
            admitted.append(Measuring(trial, config, changes, warm=False))
        return admitted

    def step(self, study, active: list[Measuring], earlier) -> list[Measuring]:
        for m in active:
            if self.stop_at is not None and len(self.measured) == self.stop_at:
                self.cut = m.config
                raise KeyboardInterrupt  # Ctrl-C while this trial is measured
            self.measured.append(m.config)
            tell(study, m.trial, self.outcome(m), 0.0, earlier)
        return []

    def outcome(self, m: Measuring) -> TrialOutcome:
        if not m.changes:
            return TrialOutcome(m.trial.number, m.config, {}, "baseline", 0.0, [], ())
        score = sum(len(v) for v in m.config.values()) / 100.0  # any function of the config
        return TrialOutcome(m.trial.number, m.config, m.changes, "scored", score, [score] * 2,
                            ())


def _complete(url: str) -> list[optuna.trial.FrozenTrial]:
    study = optuna.load_study(study_name="seeds", storage=url)
    return [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]


def _configs(url: str) -> list[tuple[str, ...]]:
    return [tuple(SPACE.config(t.params).values()) for t in _complete(url)]


@pytest.fixture
def url(tmp_path: Path) -> str:
    return sqlite_url(tmp_path / "seeds-tune.sqlite")


def test_two_workers_started_together_propose_different_configurations(url):
    first, second = Worker(url), Worker(url)
    # They take turns, a trial each: the baseline, then 8 of TPE's random start-up trials.
    for total in range(1, 10):
        (first if total % 2 else second).run(total)
    configs = _configs(url)
    assert len(configs) == 9 and len(set(configs)) == 9, configs
    assert first.measured and second.measured


def test_a_study_taken_up_again_goes_on_instead_of_repeating_itself(url):
    Worker(url).run(5)  # the baseline and 4 trials: the study is done
    Worker(url).run(9)  # trials raised: 4 more, proposed anew
    configs = _configs(url)
    assert len(configs) == 9 and len(set(configs)) == 9, configs


def test_after_a_stop_mid_trial_the_cut_trial_is_measured_once_and_nothing_else_twice(url):
    worker = Worker(url)
    worker.stop_at = 3
    with pytest.raises(KeyboardInterrupt):
        worker.run(9)
    again = Worker(url)
    again.run(9)
    configs = _configs(url)
    assert len(configs) == 9 and len(set(configs)) == 9, configs
    # The trial cut short was queued again and is the first the next invocation measures.
    assert again.measured[0] == worker.cut and worker.cut not in worker.measured


CHOICES = Space((Dimension("innodb_flush_method", choices=("fsync", "O_DIRECT")),
                 Dimension("join_cache_level", 1, 2, 1, False)))


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_a_repeated_proposal_is_not_measured_and_a_used_up_space_ends_the_search(url, sampler):
    """Four configurations in all: the sampler soon proposes one measured already. It is not
    measured again (nor counted as a trial); once no new one is left, the search ends."""
    baseline = {"innodb_flush_method": "fsync", "join_cache_level": "2"}
    worker = Worker(url, CHOICES, baseline, sampler)
    assert worker.run(8) == "space"
    configs = [tuple(c.values()) for c in worker.measured]
    assert len(configs) == 4 and len(set(configs)) == 4
    study = optuna.load_study(study_name="seeds", storage=url)
    repeats = [t for t in study.trials if "repeats" in t.user_attrs]
    assert all(t.state == optuna.trial.TrialState.FAIL for t in repeats)
    assert len(_complete(url)) == 4
