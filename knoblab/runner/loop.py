"""The measurement loop. A trial is one configuration measured once on a server configured
for it (a sandbox started for it, or a running server with its settings changed), so
repetitions of a point are spread over separate starts (a start is itself a source of
variance) and interleaved with the other points in a seeded shuffled order (machines drift).
Each trial is stored as soon as it ends. The loop knows workloads only through
`knoblab.workloads.Workload` and servers only through `knoblab.server.Target`."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pymysql

from knoblab.connection import Server
from knoblab.errors import STOP, UserError, stop_here
from knoblab.results import build_results
from knoblab.runner.checks import Listener, Prepared, Settings, trial_label
from knoblab.runner.wording import next_command, point_text
from knoblab.seconds import Second
from knoblab.server import NoSpace, ServerRefused, Tampered
from knoblab.server.cgroups import client_apart
from knoblab.server.settings import SettingRefused, set_globals
from knoblab.store import SECOND_FIELDS, Store, Trial
from knoblab.vocabulary import PointVerdict, RunStatus, StopReason, TrialState
from knoblab.workloads import WorkloadError
from knoblab.workloads.base import Measured, Rounds


def plan_order(n_points: int, repetitions: int, seed: int) -> list[tuple[int, int]]:
    """(point, repetition) pairs: every round visits each point once, in an order that is
    shuffled and counterbalanced: each run of `n_points` rounds is a shuffled Latin square, so
    that in it every point takes every place once (first on a start, second, …, last) — a
    place that is slower or faster than the others (the first after a start) reaches the
    points alike, and with two points the first alternates round by round."""
    rng = random.Random(seed)
    order: list[tuple[int, int]] = []
    for first in range(0, repetitions, max(1, n_points)):
        points = rng.sample(range(n_points), n_points)
        places = rng.sample(range(n_points), n_points)
        turns = rng.sample(range(n_points), n_points)
        for repetition, turn in zip(range(first, repetitions), turns, strict=False):
            order += [(points[(place + turn) % n_points], repetition) for place in places]
    return order


class Item(NamedTuple):
    """One measurement the plan holds: a point's repetition, at its place in the run's order."""

    position: int
    point: int
    repetition: int


@dataclass(frozen=True)
class Outcome:
    """How a trial ended, as it is stored (`Store.finish_trial`) and shown."""

    status: TrialState
    error: str | None = None
    value: float | None = None
    effective: Settings | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def start_failed(self) -> bool:
        """The server would not start (or take the settings) for this point."""
        return bool(self.details.get("start_failed"))


def execute(run_id: str, prepared: Prepared, store: Store, listener: Listener) -> None:
    spec = prepared.spec
    # Points that cannot run here (a step that changes nothing, a setting the server lacks)
    # are not planned at all: their place in the results says why.
    order = [(p, r) for p, r in plan_order(len(prepared.points), spec.workload.rounds.most,
                                           spec.statistics.seed)
             if p not in prepared.unavailable]
    store.discard_unfinished(run_id)
    finished = {(t.point_idx, t.repetition): t for t in store.trials(run_id)
                if t.status in (TrialState.DONE, TrialState.FAILED)}
    refused: dict[int, str] = {t.point_idx: t.error or "" for t in finished.values()
                               if t.status == TrialState.FAILED and
                               (t.details or {}).get("start_failed")}
    listener.plan(len(order), len(finished), spec.workload.objective.unit)
    try:
        with contextlib.ExitStack() as sessions:
            for label, target in prepared.targets.items():
                plan = prepared.plans[label]
                touched = list(dict.fromkeys([*plan.base, *(
                    n for r, c in prepared.points if prepared.label(r) == label for n in c)]))
                sessions.enter_context(target.session(store, run_id, touched))
            _run_plan(run_id, prepared, store, listener, order, finished, refused)
    except KeyboardInterrupt:
        store.set_status(run_id, RunStatus.INTERRUPTED, "interrupted by the user")
        raise
    except UserError as exc:
        store.set_status(run_id, RunStatus.FAILED, str(exc))
        resume = f"knoblab resume {run_id}"
        run = store.run(run_id)
        if resume in str(exc) and next_command(run) != resume:  # a study's: tune goes on
            raise UserError(str(exc).replace(resume, next_command(run))) from None
        raise
    except BaseException as exc:
        store.set_status(run_id, RunStatus.FAILED, f"{type(exc).__name__}: {exc}")
        raise
    store.set_status(run_id, RunStatus.DONE)


def _run_plan(run_id: str, prepared: Prepared, store: Store, listener: Listener,
              order: list[tuple[int, int]], finished: dict[tuple[int, int], Trial],
              refused: dict[int, str]) -> None:
    """Round after round, each block after block (a block: the items measured on one server
    start, one item with restarts); with adaptive repetitions, a look between rounds decides
    whether another is needed (and affordable)."""
    rounds = prepared.spec.workload.rounds
    # The budget is wall time: this invocation's, server starts included, on top of what the
    # run's earlier invocations measured.
    began, earlier = time.monotonic(), measuring_seconds(list(finished.values()))
    trials = _Trials(run_id, prepared, store, listener, finished, refused)
    by_round: dict[int, list[Item]] = {}
    for position, (point_idx, repetition) in enumerate(order):
        by_round.setdefault(repetition, []).append(Item(position, point_idx, repetition))
    for number, items in sorted(by_round.items()):
        if rounds.adaptive and number >= rounds.floor:
            stopped = _look(run_id, store, listener, rounds, number, len(items),
                            earlier + time.monotonic() - began)
            if stopped is not None:
                store.update_info(run_id, stopped=stopped)
                return
        for block in _blocks(prepared, items):
            _measure_block(trials, block)
    if rounds.adaptive:
        store.update_info(run_id, stopped={"reason": StopReason.CEILING,
                                           "rounds": rounds.ceiling})


# Futility: from half the ceiling's rounds (and at least FUTILE_FROM, for a spread estimated
# from a few), a run stops when each undecided comparison, its difference and spread as
# measured, would need more than FUTILE_BEYOND times the rounds left to be decided. A
# setting that does nothing, judged against a min_effect of 3% on a machine whose single
# measurements vary by 13%, needs some 100 rounds: the ceiling's 20 buy only time. Stopping
# for futility never makes a verdict less sure (the boundaries spend α only on decisions).
FUTILE_FROM = 5


FUTILE_BEYOND = 2


def _look(run_id: str, store: Store, listener: Listener, rounds: Rounds, done_rounds: int,
          per_round: int, elapsed: float = 0.0) -> dict[str, Any] | None:
    """After `done_rounds` rounds: why to stop now, or None to measure another round.
    `elapsed`: the run's wall time so far (server starts included)."""
    results = build_results(store, run_id)
    undecided = [p for p in results.points if p.verdict == PointVerdict.INCONCLUSIVE
                 and p.p_value is not None]
    if not undecided:
        return {"reason": StopReason.DECIDED, "rounds": done_rounds}
    left = rounds.ceiling - done_rounds
    needs = [p.extra_rounds for p in undecided]
    if done_rounds >= max(FUTILE_FROM, rounds.ceiling // 2) and all(
            n is not None and n > FUTILE_BEYOND * left for n in needs):
        return {"reason": StopReason.FUTILE, "rounds": done_rounds,
                "needed": min(n for n in needs if n is not None)}
    trials = [t for t in store.trials(run_id) if t.status in (TrialState.DONE,
                                                              TrialState.FAILED)]
    spent = max(measuring_seconds(trials), elapsed)
    next_round = spent / max(1, len(trials)) * per_round
    if rounds.budget is not None and spent + next_round > rounds.budget:
        return {"reason": StopReason.BUDGET, "rounds": done_rounds,
                "spent": round(spent, 1)}
    names = [point_text(p.settings) for p in undecided]
    listener.decision(names, (rounds.ceiling - done_rounds) * per_round,
                      None if rounds.budget is None else max(0.0, rounds.budget - spent))
    return None


def measuring_seconds(trials: list[Trial]) -> float:
    """The wall time the trials took: in a blocked start the points' parts alternate, so
    their trials overlap and count once (the union of their spans, not the sum)."""
    total, reached = 0.0, -math.inf
    for began, ended in sorted((t.started, t.started + t.seconds) for t in trials):
        if ended > reached:
            total += ended - max(began, reached)
            reached = ended
    return total


def _blocks(prepared: Prepared, items: list[Item]) -> list[list[Item]]:
    """A round's items by the server start they share: in the blocked design, the points on
    one server and data; otherwise each item alone (a restart is a block of one)."""
    if not prepared.blocked:
        return [[item] for item in items]
    blocks: dict[tuple[str, str], list[Item]] = {}
    for item in items:
        requested = prepared.points[item.point][0]
        key = (prepared.label(requested), prepared.data(requested).key)
        blocks.setdefault(key, []).append(item)
    return list(blocks.values())


def _outcome(exc: BaseException, *, starting: bool = False, shared: bool = False
             ) -> Outcome | None:
    """What a trial that `exc` ended is stored as: the one place where errors become
    outcomes.

    FAILED, and the run goes on: the server refused the configuration (`start_failed`; with
    restarts the point's later repetitions are skipped), or the measurement failed (the server
    died or refused mid-measurement, or the workload changed it). `starting`: raised by a
    server's start or stop, outside any measurement; `shared`: by a start serving a round's
    points, which then fail as points whose start failed — but a failure of the workload
    there is the run's. DISCARDED, and the run stops: a stop, or a fault of the run rather
    than of this configuration; the trial is not a measurement. None: a bug, raised as it is.
    """
    if isinstance(exc, KeyboardInterrupt):
        return Outcome(TrialState.DISCARDED, "interrupted")
    said = f"server error: {exc}" if isinstance(exc, pymysql.MySQLError) else str(exc)
    # A setting refused in place fails that measurement (as the MySQL error it also is).
    if isinstance(exc, ServerRefused) and (starting or not isinstance(exc, SettingRefused)):
        return Outcome(TrialState.FAILED, str(exc), details={"start_failed": True})
    if starting and shared:
        if isinstance(exc, (NoSpace, pymysql.MySQLError)):
            return Outcome(TrialState.FAILED, said, details={"start_failed": True})
    elif isinstance(exc, (WorkloadError, NoSpace, Tampered, pymysql.MySQLError)):
        return Outcome(TrialState.FAILED, said)
    if isinstance(exc, UserError):
        return Outcome(TrialState.DISCARDED, str(exc))
    return None


@dataclass
class _Trials:
    """Where a run's trials go: begun, stored with their outcome the moment it is known, and
    shown."""

    run_id: str
    prepared: Prepared
    store: Store
    listener: Listener
    finished: dict[tuple[int, int], Trial]  # by (point, repetition): not measured again
    refused: dict[int, str]  # points the server would not start with, and what it said

    def begin(self, item: Item) -> TrialRecorder:
        position, point_idx, repetition = item
        trial_id = self.store.begin_trial(self.run_id, point_idx=point_idx,
                                          repetition=repetition, position=position)
        return TrialRecorder(self.store, self.listener, trial_id,
                             trial_label(self.prepared, point_idx))

    def finish(self, item: Item, recorder: TrialRecorder | None, outcome: Outcome) -> None:
        """The trial's outcome stored (the trial begun now if it was not), then shown."""
        recorder = recorder or self.begin(item)
        if outcome.start_failed:
            self.refused[item.point] = outcome.error or ""
        self.store.finish_trial(recorder.trial_id, status=outcome.status, value=outcome.value,
                                effective=outcome.effective, details=outcome.details,
                                error=outcome.error)
        self.listener.trial(recorder.label, item.repetition, outcome.status, outcome.value,
                            outcome.error)

    def discard(self, recorders: list[TrialRecorder], why: str) -> None:
        for recorder in recorders:
            self.store.finish_trial(recorder.trial_id, status=TrialState.DISCARDED, error=why)


def _measure_block(trials: _Trials, items: list[Item]) -> None:
    """A block's items not measured before, on one server start; those a measurement left
    without a server to be measured on (it died, or the workload changed it), on another."""
    pending = [item for item in items if (item.point, item.repetition) not in trials.finished]
    starts = 0
    while pending:
        if STOP.is_set():
            stop_here()  # a stop whose exception Python dropped (see errors.STOP)
        pending = _start(trials, pending, starts)
        starts += 1


def _start(trials: _Trials, items: list[Item], number: int) -> list[Item]:
    """One server start measuring the items: configured with the base settings, each point's
    own set in place (blocked); or, for a block of one, with the point's own settings. The
    items left for another start."""
    prepared = trials.prepared
    requested, config = prepared.points[items[0].point]
    base = prepared.plans[prepared.label(requested)].base
    if prepared.blocked:
        settings = base
        start = _Start(trials, items, True, f"round {items[0].repetition} start {number}")
    else:
        (item,) = items  # a restart is a block of one
        if item.point in trials.refused:
            # The server refused this configuration before: it will again.
            trials.finish(item, None, Outcome(TrialState.FAILED, trials.refused[item.point],
                                              details={"start_failed": True, "skipped": True}))
            return []
        settings = {**base, **config}
        start = _Start(trials, items, False)
        start.open[item] = trials.begin(item)  # the start is this point's: its trial spans it
    try:
        try:
            with prepared.target(requested).configured(settings, prepared.data(requested),
                                                       prepared.spec.shape(requested)
                                                       ) as (server, costs):
                start.measure(server, costs)
        except SettingRefused as exc:
            raise _shared(exc, base) from None
    except BaseException as exc:
        outcome = _outcome(exc, starting=True, shared=prepared.blocked)
        if outcome is None:
            raise
        if outcome.status == TrialState.DISCARDED:
            trials.discard(list(start.open.values()), outcome.error or "")
            raise
        # No start (or no server to read back): what waited for it fails with it.
        for item in start.left:
            trials.finish(item, start.open.get(item), outcome)
        return []
    return start.close()


def _shared(exc: SettingRefused, base: Settings) -> UserError:
    """A base setting ([server.config]) the server refuses fails every point alike: one line
    naming it, and the run stops; a point's own setting fails that point (`exc`)."""
    if exc.name in base and base[exc.name] == exc.value:
        return UserError(f"[server.config] {exc}; every point shares it: change or remove it")
    return exc


@dataclass
class _Start:
    """One server start measuring a block's items.

    Shared by a round's points (`in_place`, the blocked design), each point's settings set in
    place: a measurement in parts (the query kind's timed runs) is taken part by part across
    the points — pass after pass, each in a new shuffled order — so that a slow moment of the
    machine, which on a cloud VM lasts about a run, reaches the points alike instead of one
    point's whole measurement; each point is stored the moment its last part is in.

    A point's own (restarts): its settings given at start, nothing set in place, no warm-up
    pass, the workload's measurement in one piece (`measure`: the query kind's watches its
    timed runs together); the trial spans the start, stored once the server stopped."""

    trials: _Trials
    items: list[Item]
    in_place: bool
    name: str = ""  # "round R start S", kept with each trial of a shared start
    open: dict[Item, TrialRecorder] = field(default_factory=dict)  # begun, not stored
    held: dict[Item, Outcome] = field(default_factory=dict)  # stored at close()
    costs: dict[str, Any] = field(default_factory=dict)  # stored with the first point done
    started_with: Settings = field(default_factory=dict)
    stored: set[Item] = field(default_factory=set)
    # The server-wide settings (GLOBAL scope) in force at this start's last load; None before
    # its first: a part needs no untimed pass before it when only per-session settings changed.
    warm: Settings | None = None

    @property
    def left(self) -> list[Item]:
        """The items with no outcome stored: after a dead server, the next start's."""
        return [item for item in self.items if item not in self.stored]

    def measure(self, server: Server, costs: dict[str, Any]) -> None:
        """Every item, part after part; a measurement that kills or changes the server ends
        the start, the items not yet measured left to the next (their parts so far
        discarded)."""
        prepared = self.trials.prepared
        workload = prepared.spec.workload
        self.costs = costs
        if self.in_place:
            # What the start began with, for every setting some point here changes: a point
            # that leaves a setting alone (a step's base) gets it back, not the last point's.
            varying = list(dict.fromkeys(n for item in self.items
                                         for n in prepared.points[item.point][1]))
            self.started_with = server.global_values(varying)
        passes = workload.parts if self.in_place else 1
        parts: dict[Item, list[Measured]] = {item: [] for item in self.items}
        effective: dict[Item, Settings] = {}
        order = list(self.items)
        shuffle = random.Random(f"{prepared.spec.statistics.seed}/{self.trials.run_id}/{self.name}")
        for number in range(passes):
            if number:
                shuffle.shuffle(order)
            for item in order:
                if item not in parts:
                    continue  # failed in an earlier pass
                if STOP.is_set():
                    stop_here()
                if item not in self.open:
                    self.open[item] = self.trials.begin(item)
                try:
                    parts[item].append(self._part(server, item, effective, number == 0))
                except Exception as exc:
                    outcome = _outcome(exc)
                    if outcome is None or outcome.status == TrialState.DISCARDED:
                        raise  # the run's fault, not this point's
                    del parts[item]
                    self._end(item, outcome)
                    if parts and self._lost(server, exc):
                        return
                    continue
                if number == passes - 1:
                    measured = workload.join(parts.pop(item)) if self.in_place \
                        else parts.pop(item)[0]
                    self._end(item, Outcome(TrialState.DONE, value=measured.value,
                                            effective=effective[item],
                                            details=measured.details))

    def _part(self, server: Server, item: Item, effective: dict[Item, Settings], first: bool
              ) -> Measured:
        """One part of the item's measurement (the whole of it, on its own start), its
        settings set in place first on a shared start, and read back the first time."""
        prepared = self.trials.prepared
        requested, config = prepared.points[item.point]
        target = prepared.target(requested)
        settings = {**prepared.plans[prepared.label(requested)].base, **config}
        if self.in_place:
            set_globals(server.connect, target.catalog, {**self.started_with, **config})
        if first:
            effective[item] = server.global_values(list(settings))
        session_knobs = [k for k in settings if target.catalog.knobs[k].scope == "SESSION"]
        workload, recorder = prepared.spec.workload, self.open[item]
        # The point's settings as read back are checked right before the measurement, and
        # what the workload changed after it (the settings, the data, the login): a
        # measurement that did not run on the server as configured fails, saying why.
        # The load's client runs off the server's CPUs where [machine] left it some.
        with server.watch(effective[item]), client_apart(server.pid) as where:
            if not self.in_place:
                measured = workload.measure(server, requested, session_knobs, recorder)
            else:
                # Never the first load after the start, nor the first after a change of a
                # server-wide setting (which may have emptied a cache: a smaller buffer pool),
                # against warm ones: such a part follows an untimed pass under its own
                # settings. A per-session setting (a sort buffer) holds no cache: the load
                # before, under other such values, left the server as warm.
                in_force = {k: v for k, v in {**self.started_with, **config}.items()
                            if target.catalog.knobs[k].scope != "SESSION"}
                if in_force != self.warm:
                    workload.warm_up(server, requested, session_knobs)
                self.warm = in_force
                measured = workload.measure_part(server, requested, session_knobs, recorder)
        measured.details.update(where)
        return measured

    def _lost(self, server: Server, exc: Exception) -> bool:
        """Whether a failed measurement left the server unfit for the other points: changed
        by the workload (not the server they were measured on) or dead. Their trials so far
        are discarded: they are measured again on a new start."""
        if isinstance(exc, Tampered):
            why = "another point's measurement changed the server"
        elif _answers(server):
            return False
        else:
            why = "the server died during another point's measurement"
        self.trials.discard(list(self.open.values()), why)
        self.open.clear()
        return True

    def _end(self, item: Item, outcome: Outcome) -> None:
        """The item's outcome, with what the start cost (on the first point done) and the
        block's name: stored now on a shared start, once the server stopped on its own."""
        details = dict(outcome.details)
        if outcome.status == TrialState.DONE:
            details.update(self.costs)
            self.costs = {}
        if self.in_place:
            details["block"] = self.name
        outcome = dataclasses.replace(outcome, details=details)
        if self.in_place:
            self._store(item, outcome)
        else:
            self.held[item] = outcome  # its start is part of its trial

    def _store(self, item: Item, outcome: Outcome) -> None:
        self.trials.finish(item, self.open.pop(item), outcome)
        self.stored.add(item)

    def close(self) -> list[Item]:
        """After the server stopped: the outcomes held till then stored; the items left for
        another start."""
        for item, outcome in self.held.items():
            self._store(item, outcome)
        return self.left


def _answers(server: Server) -> bool:
    try:
        server.global_values(["version"])
    except (pymysql.MySQLError, OSError):
        return False
    return True


@dataclass
class TrialRecorder:
    """Stores what a running trial reports each second (workload and OS), as it arrives."""

    store: Store
    listener: Listener
    trial_id: int
    label: str
    offset: float = 0.0  # added to the OS seconds' times
    last: float = 0.0  # the latest time stored

    def second(self, second: Second) -> None:
        self.store.add_second(self.trial_id, second.t,
                              **{f: getattr(second, f) for f in SECOND_FIELDS})
        self.listener.second(self.label, second)

    def os_seconds(self, samples: list[tuple[float, dict[str, float]]]) -> None:
        for t, figures in samples:
            if t + self.offset <= self.last:
                # A measurement in parts: each part's seconds count from its own start;
                # they follow the earlier parts'.
                self.offset = self.last
            self.last = t + self.offset
            self.store.add_os_second(self.trial_id, self.last, figures)
