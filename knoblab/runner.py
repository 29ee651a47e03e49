"""The experiment loop: check everything, build the data once, then run every trial of the plan.

A trial is one configuration measured once on a server configured for it (a sandbox started
for it, or a running server with its settings changed), so repetitions of a point are spread
over separate starts (a start is itself a source of variance) and interleaved with the other
points in a seeded shuffled order (machines drift). Each trial is stored as soon as it ends; a
run can be resumed and only the missing trials are run.

The loop knows workloads only through `knoblab.workloads.Workload` and servers only through
`knoblab.server.Target`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import random
import re
import shlex
import socket
import threading
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import pymysql

from knoblab import __version__, safety, stats
from knoblab.catalog import Catalog
from knoblab.connection import Progress, Server
from knoblab.datasets import Dataset
from knoblab.errors import STOP, BudgetTooShort, UserError, stop_here
from knoblab.machine import describe as describe_machine
from knoblab.results import build_results
from knoblab.server import Data, NoSpace, ServerRefused, Tampered, Target
from knoblab.server.cgroups import client_apart
from knoblab.server.sandbox import alive, other_owners, reap_orphans
from knoblab.server.settings import SettingRefused, set_globals
from knoblab.server.shape import Shape
from knoblab.spec import MACHINE, Point, Spec, parse_spec
from knoblab.store import SECOND_FIELDS, RunInfo, Store, Trial
from knoblab.units import format_duration
from knoblab.vocabulary import PointVerdict, RunStatus, TrialState
from knoblab.words import workload_changes
from knoblab.workloads import Workload, WorkloadError
from knoblab.workloads.base import Measured, Rounds, Second

Settings = dict[str, str]


class Listener(Protocol):
    def message(self, text: str) -> None: ...
    def dataset_progress(self, done: int, total: int) -> None: ...
    def plan(self, total: int, done: int, unit: str) -> None: ...
    def trial(self, label: str, repetition: int, status: str, value: float | None,
              error: str | None) -> None: ...
    def second(self, label: str, second: Second) -> None: ...
    def decision(self, undecided: list[str], most_left: int, budget_left: float | None
                 ) -> None:
        """Between rounds of adaptive repetitions: what is still undecided, how many
        measurements may still come at most, and the seconds left in the budget."""


@dataclass(frozen=True)
class TargetPlan:
    """One server's share of the run: its base settings, what it lacks, its points."""

    base: Settings
    lacking: list[str]  # settings of the spec this server does not have
    points: list[Point]
    warnings: list[str]


@dataclass
class Prepared:
    """Everything a run needs, checked: the servers, the points, the data."""

    spec: Spec
    targets: dict[str, Target]
    plans: dict[str, TargetPlan]
    points: list[tuple[Settings, Settings]]  # (requested, config) per point, in plan order
    steps: list[dict[str, Any] | None]  # per point, its step (steps experiments)
    unavailable: dict[int, str]  # points not run, and why (a step that changes nothing here)
    left_out: dict[str, str]  # servers that could not be used, and why
    warnings: list[str]
    datadirs: dict[str, Path | None] = field(default_factory=dict)  # the first server's, by key
    blocked: bool = False  # one start per round measures every point (settings set in place)
    design_why: str = ""

    def label(self, requested: Mapping[str, str]) -> str:
        return requested.get("binary", "")

    def target(self, requested: Mapping[str, str]) -> Target:
        return self.targets[self.label(requested)]

    def data(self, requested: Settings) -> Data:
        work = self.spec.workload
        return _data(work.dataset(requested), work.writes_data, _no_progress)

    def describe_servers(self) -> list[dict[str, object]]:
        described: list[dict[str, object]] = [
            {**target.describe(), "missing": self.plans[label].lacking, "error": None}
            for label, target in self.targets.items()]
        for label, error in self.left_out.items():
            described.append({"label": label, "binary": self.spec.target.servers.get(label, ""),
                              "version": None, "version_line": None, "compile": {},
                              "missing": [], "error": error})
        return described


def _no_progress(done: int, total: int) -> None:
    """Data rebuilt before a measurement on a running server: no progress bar."""


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


# --- checks, in one pass, before anything is built or started ------------------------------


OpenTargets = Callable[[Spec, Path, Callable[[str], None]],
                      tuple[dict[str, Target], dict[str, str]]]


def open_servers(spec: Spec, home: Path, message: Callable[[str], None]
                 ) -> tuple[dict[str, Target], dict[str, str]]:
    """The spec's servers: sandboxes of its binaries, or the running server it names."""
    return spec.target.open(home, message, spec.machine)


def prepare(spec: Spec, home: Path, listener: Listener, store: Store,
            resuming: str | None = None, open_servers: OpenTargets = open_servers) -> Prepared:
    """Spec (already parsed) → servers → each server's catalog → the kind's and the server's
    own checks → safety → the plan; then the data, built once. A bad value anywhere is
    refused before a template is built or a server started for a measurement."""
    if spec.searches:
        found = _spec_file(spec.source, spec.base_dir)
        raise UserError("this spec is a search ([tune]): run it with knoblab tune " + (
            shlex.quote(str(found)) if found else "(the same spec), not knoblab run"))
    reaped = reap_orphans(home)
    if reaped:
        listener.message(f"stopped {reaped} sandbox server(s) left behind by a killed knoblab")
    targets, left_out = open_servers(spec, home, listener.message)
    plans = plan_points(spec, {label: t.catalog for label, t in targets.items()})
    points: list[tuple[Settings, Settings]] = []
    steps: list[dict[str, Any] | None] = []
    unavailable: dict[int, str] = {}
    warnings: list[str] = []
    for label, plan in plans.items():
        where = f" on {label}" if label else ""
        warnings += [f"{w}{where}" for w in plan.warnings]
        for point in plan.points:
            requested = {"binary": label, **point.requested} if label else point.requested
            if point.step and point.step.get("skip"):
                unavailable[len(points)] = str(point.step["skip"])
            points.append((requested, point.config))
            steps.append(point.step)
    warnings += [*spec.workload.warnings, *_few_rounds(spec), *_disturbances(home, store)]
    prepared = Prepared(spec, targets, plans, points, steps, unavailable, left_out, warnings)
    _check_budget(spec.workload, len(points) - len(unavailable))
    for label, target in targets.items():
        _check_target(prepared, label, target, store, resuming)
    prepared.blocked, prepared.design_why = _design(prepared)
    for warning in warnings:
        listener.message(f"warning: {warning}")
    for label, target in targets.items():
        _prepare_data(prepared, label, target, listener)
    return prepared


def _design(prepared: Prepared) -> tuple[bool, str]:
    """Blocked (one start per round measures every point, the settings changed in place)
    when every setting that differs between points can be changed on a running server and the
    workload leaves its data as it found it; else a start per measurement. The reason is
    kept with the run and shown in its report."""
    spec = prepared.spec
    asked = spec.workload.rounds.design
    varying: dict[str, Target] = {}
    for requested, config in prepared.points:
        target = prepared.target(requested)
        base = prepared.plans[prepared.label(requested)].base
        for name, value in config.items():
            if base.get(name) != value:
                varying.setdefault(name, target)
    restart_only = [name for name, target in varying.items()
                    if not target.catalog.knobs[name].dynamic]
    if asked == "restarts":
        return False, "a server start per measurement, as the spec asks (design = \"restarts\")"
    machine = [name for name in spec.sweep if name.startswith(MACHINE)]
    if machine:
        why = f"{machine[0]} is the sandbox's machine, given when it starts"
        if asked == "blocked":
            raise UserError(f"[workload] design = \"blocked\": {why}; use design = "
                            "\"restarts\" (or \"auto\") for it")
        return False, f"a server start per measurement: {why}"
    if restart_only:
        why = (f"{restart_only[0]} takes effect only at a server start"
               + (f" (so do {', '.join(restart_only[1:])})" if restart_only[1:] else ""))
        if asked == "blocked":
            raise UserError(f"[workload] design = \"blocked\": {why}; use design = "
                            "\"restarts\" (or \"auto\") for it")
        return False, f"a server start per measurement: {why}"
    if spec.workload.writes_data:
        why = "the workload changes its data, so each measurement needs a fresh copy"
        if asked == "blocked":
            raise UserError(f"[workload] design = \"blocked\": {why}; use design = "
                            "\"restarts\" (or \"auto\")")
        return False, f"a server start per measurement: {why}"
    return True, ("blocked: each round measures every point on one server start, the "
                  "settings changed in place (" + ", ".join(varying)
                  + (" needs" if len(varying) == 1 else " need") + " no restart), "
                  "and points are compared within starts")


# What one measurement costs at the least besides the workload's own time (configuring the
# server, connecting, preparing): for refusing a budget that cannot hold the first rounds.
LEAST_TRIAL_SECONDS = 0.5


def _check_budget(work: Workload, points: int) -> None:
    """A budget that cannot hold the rounds every decision needs is refused before anything
    runs, saying how long a round takes at the least."""
    rounds = work.rounds
    if rounds.budget is None:
        return
    per_trial = max(work.least_seconds + LEAST_TRIAL_SECONDS, rounds.expected or 0.0)
    one_round = points * per_trial
    if rounds.budget < rounds.floor * one_round:
        raise BudgetTooShort(
            f"[workload] budget = {format_duration(rounds.budget)} cannot hold the "
            f"{rounds.floor} rounds a decision needs: one round takes at least "
            f"{format_duration(one_round)} ({points} points × {per_trial:g} s); give at least "
            f"budget = \"{math.ceil(rounds.floor * one_round)}s\", or fewer min_repetitions",
            rounds.floor * one_round)


def _few_rounds(spec: Spec) -> list[str]:
    """Fixed repetitions too few for the test to decide anything much: said before the run,
    in one sentence and its fix (the reasons are the README's, "How sure, and why")."""
    fixed = spec.workload.rounds.fixed
    if fixed is None:
        return []
    alpha, test = spec.statistics.alpha, spec.statistics.test
    reach = stats.reach(fixed, alpha, test)
    if not reach.too_few:
        return []
    if fixed < 2:
        why = "one server start per value cannot tell the setting from the start it ran on"
    elif reach.bar is None or reach.enough_bar is None:
        why = f"the {test} test cannot get below p = {reach.least_p:.2g} with them"
    else:
        why = (f"a difference is called only beyond {reach.bar:.1f} standard errors "
               f"({reach.enough} rounds: {reach.enough_bar:.1f})")
    return [f"repetitions = {fixed}: too few rounds, {why}; use repetitions = {reach.enough} "
            "or more, or \"auto\" (rounds until decided)"]


def _disturbances(home: Path, store: Store) -> list[str]:
    """Other knoblab processes measuring on this machine: they take each other's CPU and disk."""
    others = sorted(set(other_owners(home)) | set(store.holders_on(socket.gethostname())) -
                    {os.getpid()})
    others = [pid for pid in others if alive(pid)]
    if not others:
        return []
    return [f"another knoblab (process {', '.join(map(str, others))}) is measuring on this "
            "machine: the two runs disturb each other's timings; run one at a time"]


def check_points(spec: Spec, targets: dict[str, Target], store: Store,
                 check_memory: bool = True) -> None:
    """The checks `prepare` makes of a spec's points, on servers already open, building and
    starting nothing: a search checks every kind of trial it may make before the first."""
    plans = plan_points(spec, {label: t.catalog for label, t in targets.items()})
    points: list[tuple[Settings, Settings]] = []
    unavailable: dict[int, str] = {}
    for label, plan in plans.items():
        for point in plan.points:
            if point.step and point.step.get("skip"):
                unavailable[len(points)] = str(point.step["skip"])
            points.append(({"binary": label, **point.requested} if label else point.requested,
                           point.config))
    prepared = Prepared(spec, targets, plans, points, [], unavailable, {}, [])
    for label, target in targets.items():
        _check_target(prepared, label, target, store, None, check_memory)


def _check_target(prepared: Prepared, label: str, target: Target, store: Store,
                  resuming: str | None, check_memory: bool = True) -> None:
    spec, plan = prepared.spec, prepared.plans[label]
    mine = [p for i, p in enumerate(prepared.points)
            if prepared.label(p[0]) == label and i not in prepared.unavailable]
    names = list(dict.fromkeys([*plan.base, *(n for _, c in mine for n in c)]))
    check_settable(target.catalog, names)
    check_not_fixed(target.catalog, [{**plan.base, **c} for _, c in mine])
    target.check(names, store, resuming)
    data = {d.key: d for d in (spec.workload.dataset(r) for r, _ in prepared.points)}
    target.check_workload(
        functools.partial(_check_running_server, spec.workload, list(data.values())), set(data))
    spec.workload.check(target.catalog, plan.base)
    _check_connections(spec, target, plan.base, mine)
    # Each machine the points give their sandboxes ([machine], swept or not), checked once;
    # the memory budget is the sandbox's, or this machine's: it says nothing about a server
    # elsewhere.
    by_shape: dict[Shape | None, list[tuple[Settings, Settings]]] = {}
    for point in mine:
        by_shape.setdefault(spec.shape(point[0]), []).append(point)
    for shape, points in by_shape.items():
        if shape is not None:
            target.check_shape(shape)
        memory = shape.memory if shape is not None else None
        safety.check(points, plan.base, target.catalog,
                     connections=spec.workload.connections_for,
                     allow_durability_tradeoff=spec.allow_durability_tradeoff,
                     memory_budget=spec.memory_budget,
                     check_memory=check_memory and (target.local or
                                                    spec.memory_budget is not None),
                     machine_memory=memory)


def _check_connections(spec: Spec, target: Target, base: Settings,
                       points: list[tuple[Settings, Settings]]) -> None:
    """A point whose workload opens more connections at once than its max_connections lets
    in would fail every measurement (error 1040, too many connections): refused first."""
    if "max_connections" not in target.catalog.knobs:
        return
    default = target.defaults(["max_connections"]).get("max_connections")
    for requested, config in points:
        try:
            limit = int(str({**base, **config}.get("max_connections", default)))
        except ValueError:
            continue  # not known here
        need = spec.workload.connections_for(requested)
        if need > limit:
            label = _point_text(requested) or "the base configuration"
            raise UserError(f"{label}: the workload opens {need} connections at once "
                            f"(knoblab's own included) and max_connections = {limit} lets "
                            f"in {limit}; give max_connections = {need} or more "
                            "([server.config] or [sweep]), or open fewer connections")


def _prepare_data(prepared: Prepared, label: str, target: Target, listener: Listener) -> None:
    """Each data variant the server's points use, built once (into a template, or into
    knoblab's database on a running server); said after it worked, so that a setup error is
    the only line a bad script gets."""
    work = prepared.spec.workload
    variants = {d.key: d for d in (work.dataset(r) for r, _ in prepared.points
                                   if prepared.label(r) == label)}
    for key, dataset in variants.items():
        datadir = target.prepare(_data(dataset, work.writes_data, listener.dataset_progress))
        if label == next(iter(prepared.targets)):
            prepared.datadirs[key] = datadir
        listener.message(target.data_message(dataset.label()))


def _check_running_server(work: Workload, data: list[Dataset], where: str,
                          datadir: Path | None) -> None:
    """What a running server would not allow: the workload's own refusals, then its data's."""
    work.check_running_server(where, datadir)
    for dataset in data:
        dataset.check_running_server(where)


def _data(dataset: Dataset, writes: bool, progress: Progress) -> Data:
    """A point's data as a target builds it: once per key (a template, or knoblab's database
    on a running server, where a workload that writes has it rebuilt every time)."""
    return Data(dataset.key, functools.partial(_build, dataset, progress), writes,
                dataset.estimated_bytes())


def _build(dataset: Dataset, progress: Progress, server: Server) -> None:
    try:
        dataset.build(server, progress)
    except (UserError, pymysql.MySQLError) as exc:
        said = exc.args[-1] if isinstance(exc, pymysql.MySQLError) and exc.args else exc
        _stopped_in_setup(server, f"; the setup's own error: {said}")
        raise
    _stopped_in_setup(server, "")


def _stopped_in_setup(server: Server, after: str) -> None:
    """A UserError naming it when the server no longer answers after the data's setup (a
    SHUTDOWN in it, a crash): else the next connection's "Can't connect" hides the cause."""
    try:
        server.connect(connect_timeout=5).close()
        return
    except pymysql.MySQLError as exc:
        if not exc.args or exc.args[0] not in (2002, 2003, 2006, 2013):
            return  # it answers, refusing: the login checks say why
    process = getattr(server, "process", None)  # a sandbox: its log is complete once it exits
    if process is not None:
        with contextlib.suppress(Exception):
            process.wait(timeout=30)
    why = "it shut down or crashed"
    log = getattr(server, "error_log", None)  # a sandbox's; a running server's is not read
    with contextlib.suppress(Exception):
        lines = Path(log).read_text(errors="replace").splitlines() if log else []
        asked = [line for line in lines if "initiated by" in line or "Normal shutdown" in line]
        if asked:
            said = re.sub(r"^.*?\[(Note|Warning|ERROR)\]\s*", "", asked[-1].strip())
            why = f"it was shut down, as its error log says: {said}"
        elif lines:
            why += f"; its error log ends: {' | '.join(x.strip() for x in lines[-4:])}"
    raise UserError(f"the server stopped during the workload's setup ({why}): the setup must "
                    f"leave the server running (no SHUTDOWN, nothing that crashes it){after}")


def plan_points(spec: Spec, catalogs: dict[str, Catalog]) -> dict[str, TargetPlan]:
    """Each server's points, validated against its own catalog. A setting no server has is
    an error (a typo, most likely); one that only some lack is left out on those."""
    names = spec.setting_names()
    lacking = {label: [n for n in names if not _has(catalog, n)]
               for label, catalog in catalogs.items()}
    for name in names:
        if all(name in missing for missing in lacking.values()):
            next(iter(catalogs.values())).knob(name)  # raises, with suggestions
    swept = spec.swept_settings()
    complete = [label for label in catalogs if not set(swept) & set(lacking[label])]
    if not complete:
        raise UserError("no server compared has all the swept settings "
                        f"({', '.join(swept)}); sweep settings they share")
    plans: dict[str, TargetPlan] = {}
    reference: list[Point] = []
    for label in [*complete, *(label for label in catalogs if label not in complete)]:
        catalog, missing = catalogs[label], frozenset(lacking[label])
        if label in complete:
            base, points, warnings = spec.points(catalog, missing)
            reference = reference or points
        else:
            # A swept setting this server lacks: its points are kept, and not run.
            lacks = ", ".join(n for n in swept if n in missing)
            base = spec.base_settings(catalog, missing)
            points = [Point(p.requested, {}, {"skip": f"not on this server: {lacks}"})
                      for p in reference]
            warnings = []
        plans[label] = TargetPlan(base, lacking[label], points, warnings)
    return {label: plans[label] for label in catalogs}


def _has(catalog: Catalog, name: str) -> bool:
    try:
        catalog.knob(name)
    except UserError:
        return False
    return True


def check_settable(catalog: Catalog, names: list[str]) -> None:
    for name in names:
        knob = catalog.knobs[name]
        if knob.scope == "SESSION ONLY":
            raise UserError(f"{name} exists only within one connection (a session value), "
                            "not for the server: it cannot be tuned; remove it")
        if name in OTHER_OPTION:
            raise UserError(f"{name} is set at start-up by another option ({OTHER_OPTION[name]}),"
                            " which knoblab does not give; it cannot be tuned this way")
        if not knob.startup_option and not knob.dynamic:
            raise UserError(f"{name} can be neither set at start-up nor changed at run time "
                            f"on {catalog.server_version}; it cannot be tuned")


# Read-only variables that a start-up option of another name sets.
OTHER_OPTION = {"log_bin": "log-bin, a file name that switches binary logging on",
                "log_bin_basename": "log-bin", "log_bin_index": "log-bin-index",
                "skip_external_locking": "external-locking"}

# Settings written into the data files when a data directory is created: a server started on
# a datadir made with another value refuses to start, so no sweep can vary them.
FIXED_AT_CREATION = ("innodb_page_size", "lower_case_table_names", "innodb_data_file_path")


def check_not_fixed(catalog: Catalog, configs: list[Settings]) -> None:
    for name in FIXED_AT_CREATION:
        knob = catalog.knobs.get(name)
        if knob is None:
            continue
        default = knob.default_value()
        for config in configs:
            if name in config and config[name] != default:
                raise UserError(f"{name} is fixed when a data directory is created (knoblab's "
                                f"are made with {knob.default}), so {config[name]} cannot be "
                                "measured; leave it at its default")


def read_back(spec: Spec, home: Path, store: Store, listener: Listener,
              open_servers: OpenTargets = open_servers) -> tuple[Settings, Settings]:
    """A one-step spec's step, read back twice, nothing measured: on a server started with
    it, and on one started with the base alone and given the step in place (SET GLOBAL).
    Where the two differ, a change in place is not what a start makes of the setting."""
    prepared = prepare(spec, home, listener, store, open_servers=open_servers)
    requested, config = prepared.points[-1]
    target = prepared.target(requested)
    base = prepared.plans[prepared.label(requested)].base
    data, shape = prepared.data(requested), spec.shape(requested)
    with target.configured({**base, **config}, data, shape) as (server, _):
        at_start = server.global_values(list(config))
    with target.configured(base, data, shape) as (server, _):
        set_globals(server.connect, target.catalog, config)
        in_place = server.global_values(list(config))
    return at_start, in_place


# --- runs -----------------------------------------------------------------------------------


def start_run(spec: Spec, store: Store, home: Path, listener: Listener,
              open_servers: OpenTargets = open_servers) -> str:
    prepared = prepare(spec, home, listener, store, open_servers=open_servers)
    first_label, first = next(iter(prepared.targets.items()))
    if spec.steps:
        knobs = list(dict.fromkeys(k for r, _ in prepared.points for k in r))
    else:
        knobs = list(prepared.points[0][0])
    configured = list(dict.fromkeys(n for _, config in prepared.points for n in config))
    targets = list(prepared.targets.values())
    versions = ", ".join(dict.fromkeys(t.version for t in targets))
    run_id = store.create_run(
        name=spec.name, experiment=spec.experiment, spec_source=spec.source,
        server_binary=", ".join(str(t.describe().get("binary") or t.describe()["endpoint"])
                                for t in targets),
        server_version=versions,
        info=RunInfo(
            knobs=knobs, defaults=first.defaults(configured),
            base=prepared.plans[first_label].base,
            dataset=_describe_data(prepared),
            tied=spec.tied,
            workload=_workload_info(spec),
            steady=spec.workload.steady.to_json() if spec.workload.steady else None,
            statistics=spec.statistics,
            servers=prepared.describe_servers(),
            steps=prepared.steps if spec.steps else None,
            one_at_a_time=spec.one_at_a_time,
            unavailable={str(i): why for i, why in prepared.unavailable.items()},
            warnings=prepared.warnings,
            design={"name": "blocked" if prepared.blocked else "restarts",
                    "why": prepared.design_why},
            spec_dir=str(spec.base_dir) if spec.base_dir else None,
            owner=_owner(),
            # The machine as the sandboxes had it: [machine]'s shape, and the disk its datadir
            # is on.
            machine={**describe_machine(spec.machine.datadir if spec.machine and
                                        spec.machine.datadir else home),
                     **({"shape": spec.machine.describe()} if spec.machine else {})},
            knoblab_version=__version__,
        ),
        point_list=prepared.points,
    )
    rounds = spec.workload.rounds
    times = f"{rounds.fixed} repetition{'' if rounds.fixed == 1 else 's'}" \
        if rounds.fixed is not None else (
        f"{rounds.floor} to {rounds.ceiling} repetitions (until every comparison is decided"
        + (f", within {format_duration(rounds.budget)})" if rounds.budget else ")"))
    # what will be measured: a step that changes nothing here (or a server lacks) is not run
    measured = len(prepared.points) - len(prepared.unavailable)
    skipped = (f"; {len(prepared.unavailable)} not run (nothing to change, or not on their "
               "server)" if prepared.unavailable else "")
    listener.message(f"run {run_id}: {measured} point{'' if measured == 1 else 's'} × {times} "
                     f"on {versions}{skipped}")
    with owning(store, run_id):
        execute(run_id, prepared, store, listener)
    return run_id


def resume_run(run_id: str, store: Store, home: Path, listener: Listener,
               open_servers: OpenTargets = open_servers, budget: float | None = None) -> str:
    """Finish a run that was stopped; with `budget`, also extend one with adaptive
    repetitions that its budget stopped (the new budget counts what was measured already)."""
    run = store.run(run_id)
    run_id, info = run["id"], RunInfo.from_json(run["info"])
    if info.study is not None or _searches(run["spec_source"]):
        study = f" of the tuning study {info.study}" if info.study else " of a tuning study"
        raise UserError(f"run {run_id} is a trial{study}: it is not resumed alone; run the "
                        f"study again with {next_command(run)}, which keeps its trials and "
                        "measures the rest")
    if budget is not None:
        if info.workload.get("repetitions") != "auto":
            raise UserError(f"--budget: run {run_id} has a fixed number of repetitions; a "
                            "budget applies only to repetitions = \"auto\"")
        spent = (info.stopped or {}).get("spent") or 0.0
        if info.stopped and info.stopped.get("reason") == "budget" and budget <= spent:
            raise UserError(f"--budget {format_duration(budget)}: run {run_id} has already "
                            f"measured for {format_duration(spent)}; give a larger budget")
    if run["status"] == RunStatus.DONE:
        stopped_by_budget = (info.stopped or {}).get("reason") == "budget"
        if budget is None or not stopped_by_budget:
            listener.message(f"run {run_id} is already complete" + (
                "; its budget stopped it: extend it with --budget" if stopped_by_budget
                else ""))
            return run_id
    with owning(store, run_id):
        if budget is not None:
            store.update_info(run_id, workload={**info.workload, "budget": budget},
                              stopped=None)
            info = RunInfo.from_json(store.run(run_id)["info"])
        store.update_info(run_id, owner=_owner())
        _resume(run, info, store, home, listener, open_servers)
    return run_id


def extend_run(run_id: str, spec: Spec, budget: float, store: Store, home: Path,
               listener: Listener, open_servers: OpenTargets = open_servers) -> None:
    """A tuning study's own run (a validation: `spec`, the spec it was started from), which
    its budget stopped, going on with adaptive rounds until `budget` in all (what it has
    measured counted): its sequential test goes on where it stopped."""
    info = RunInfo.from_json(store.run(run_id)["info"])
    workload = dataclasses.replace(cast(Any, spec.workload), rounds=dataclasses.replace(
        spec.workload.rounds, budget=budget))
    spec = dataclasses.replace(spec, workload=workload)
    with owning(store, run_id):
        store.update_info(run_id, workload={**info.workload, "budget": budget}, stopped=None,
                          owner=_owner())
        _go_on(run_id, spec, store, home, listener, open_servers)


def _resume(run: dict[str, Any], info: RunInfo, store: Store, home: Path, listener: Listener,
            open_servers: OpenTargets) -> None:
    run_id = run["id"]
    spec = parse_spec(tomllib.loads(run["spec_source"]), run["spec_source"], run["name"],
                      base_dir=Path(info.spec_dir) if info.spec_dir else None)
    rounds = Rounds.from_info(info.workload)
    if rounds.adaptive and rounds != spec.workload.rounds:  # a budget given to resume
        workload = dataclasses.replace(cast(Any, spec.workload), rounds=rounds)  # kinds are
        spec = dataclasses.replace(spec, workload=workload)  # frozen dataclasses
    changed = workload_changes(info.workload, json.loads(json.dumps(_workload_info(spec))))
    if changed:
        raise UserError(f"run {run_id} cannot be resumed: its workload changed since it began "
                        f"({changed}); start a new run")
    _go_on(run_id, spec, store, home, listener, open_servers)


def _go_on(run_id: str, spec: Spec, store: Store, home: Path, listener: Listener,
           open_servers: OpenTargets) -> None:
    """A stored run measured further from `spec`, the spec it began from: what it lacks."""
    prepared = prepare(spec, home, listener, store, resuming=run_id, open_servers=open_servers)
    if prepared.points != store.points(run_id):
        raise UserError(f"run {run_id} cannot be resumed: its points no longer validate the same "
                        "way against this server")
    store.set_status(run_id, RunStatus.RUNNING)
    execute(run_id, prepared, store, listener)


def next_command(run: dict[str, Any]) -> str:
    """The command that goes on with a stored run: its resume, or for a run of a tuning
    study (a trial, a validation), the study's own command."""
    info = RunInfo.from_json(run["info"])
    if info.study is None and not _searches(run["spec_source"]):
        return f"knoblab resume {run['id']}"
    folder = Path(info.spec_dir) if info.spec_dir else None
    if info.study is None:
        return tune_command(run["spec_source"], folder)
    return tune_command(run["spec_source"], folder, info.study)


def tune_command(source: str, folder: Path | None, study: str | None = None) -> str:
    """knoblab tune with the spec file holding `source` in `folder`, when one still does;
    else the study's name and the spec that made it."""
    found = _spec_file(source, folder)
    if found is not None:
        return f"knoblab tune {shlex.quote(str(found))}"
    made = f" (study {study})" if study else ""
    return f"knoblab tune with the spec that made it{made}" + (
        f", in {folder}" if folder is not None and folder.is_dir() else "")


def _spec_file(source: str, folder: Path | None) -> Path | None:
    if folder is None or not source:
        return None
    with contextlib.suppress(OSError):
        for path in sorted(folder.glob("*.toml")):
            with contextlib.suppress(OSError, UnicodeDecodeError):
                if path.stat().st_size == len(source.encode()) and path.read_text() == source:
                    return path
    return None


def _searches(source: str) -> bool:
    """Whether a stored spec is a search's ([tune]): its runs go on with knoblab tune."""
    try:
        return "tune" in tomllib.loads(source)
    except (tomllib.TOMLDecodeError, TypeError):
        return False


# A run whose holder on another machine has not renewed its claim for this long is taken over.
SILENT_HOLDER = 120.0
HEARTBEAT = 20.0


@contextlib.contextmanager
def owning(store: Store, run_id: str) -> Iterator[None]:
    """This process alone measures the run (a claim in the store, renewed while it lasts):
    two resumes started at once cannot both run its trials."""
    token = store.lock_run(run_id, _holder_gone)
    try:
        with beating(lambda: store.renew_lock(run_id, token), HEARTBEAT):
            yield
    finally:
        store.unlock_run(run_id, token)


@contextlib.contextmanager
def beating(beat: Callable[[], None], every: float) -> Iterator[None]:
    """`beat` called every `every` seconds (from another thread) while the block runs; a beat
    that fails (a database blip) is left for the next one."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every):
            with contextlib.suppress(Exception):
                beat()

    thread = threading.Thread(target=loop, name="knoblab-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _holder_gone(holder: dict[str, Any]) -> bool:
    if holder["host"] == socket.gethostname():
        return not alive(int(holder["pid"]))
    return time.time() - float(holder["heartbeat_at"]) > SILENT_HOLDER


# A trial of the plan: (its position in the plan, the point, the repetition).
Item = tuple[int, int, int]


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
        by_round.setdefault(repetition, []).append((position, point_idx, repetition))
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
        store.update_info(run_id, stopped={"reason": "ceiling", "rounds": rounds.ceiling})


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
        return {"reason": "decided", "rounds": done_rounds}
    left = rounds.ceiling - done_rounds
    needs = [p.extra_rounds for p in undecided]
    if done_rounds >= max(FUTILE_FROM, rounds.ceiling // 2) and all(
            n is not None and n > FUTILE_BEYOND * left for n in needs):
        return {"reason": "futile", "rounds": done_rounds,
                "needed": min(n for n in needs if n is not None)}
    trials = [t for t in store.trials(run_id) if t.status in (TrialState.DONE,
                                                              TrialState.FAILED)]
    spent = max(measuring_seconds(trials), elapsed)
    next_round = spent / max(1, len(trials)) * per_round
    if rounds.budget is not None and spent + next_round > rounds.budget:
        return {"reason": "budget", "rounds": done_rounds, "spent": round(spent, 1)}
    names = [_point_text(p.settings) for p in undecided]
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


def _point_text(settings: Mapping[str, str]) -> str:
    return ", ".join(f"{v}" if len(settings) == 1 else f"{k}={v}" for k, v in settings.items())


def _blocks(prepared: Prepared, items: list[Item]) -> list[list[Item]]:
    """A round's items by the server start they share: in the blocked design, the points on
    one server and data; otherwise each item alone (a restart is a block of one)."""
    if not prepared.blocked:
        return [[item] for item in items]
    blocks: dict[tuple[str, str], list[Item]] = {}
    for item in items:
        requested = prepared.points[item[1]][0]
        key = (prepared.label(requested), prepared.data(requested).key)
        blocks.setdefault(key, []).append(item)
    return list(blocks.values())


def _outcome(exc: BaseException, *, starting: bool = False, shared: bool = False
             ) -> dict[str, Any] | None:
    """What a trial that `exc` ended is stored as (`Store.finish_trial`'s arguments): the one
    place where errors become outcomes.

    FAILED, and the run goes on: the server refused the configuration (`start_failed`; with
    restarts the point's later repetitions are skipped), or the measurement failed (the server
    died or refused mid-measurement, or the workload changed it). `starting`: raised by a
    server's start or stop, outside any measurement; `shared`: by a start serving a round's
    points, which then fail as points whose start failed — but a failure of the workload
    there is the run's. DISCARDED, and the run stops: a stop, or a fault of the run rather
    than of this configuration; the trial is not a measurement. None: a bug, raised as it is.
    """
    if isinstance(exc, KeyboardInterrupt):
        return {"status": TrialState.DISCARDED, "error": "interrupted"}
    said = f"server error: {exc}" if isinstance(exc, pymysql.MySQLError) else str(exc)
    # A setting refused in place fails that measurement (as the MySQL error it also is).
    if isinstance(exc, ServerRefused) and (starting or not isinstance(exc, SettingRefused)):
        return {"status": TrialState.FAILED, "error": str(exc),
                "details": {"start_failed": True}}
    if starting and shared:
        if isinstance(exc, (NoSpace, pymysql.MySQLError)):
            return {"status": TrialState.FAILED, "error": said,
                    "details": {"start_failed": True}}
    elif isinstance(exc, (WorkloadError, NoSpace, Tampered, pymysql.MySQLError)):
        return {"status": TrialState.FAILED, "error": said}
    if isinstance(exc, UserError):
        return {"status": TrialState.DISCARDED, "error": str(exc)}
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
                             _trial_label(self.prepared, point_idx))

    def finish(self, item: Item, recorder: TrialRecorder | None, outcome: dict[str, Any]
               ) -> None:
        """The trial's outcome stored (the trial begun now if it was not), then shown."""
        recorder = recorder or self.begin(item)
        if outcome.get("details", {}).get("start_failed"):
            self.refused[item[1]] = outcome["error"]
        self.store.finish_trial(recorder.trial_id, **outcome)
        self.listener.trial(recorder.label, item[2], outcome["status"], outcome.get("value"),
                            outcome.get("error"))

    def discard(self, recorders: list[TrialRecorder], why: str) -> None:
        for recorder in recorders:
            self.store.finish_trial(recorder.trial_id, status=TrialState.DISCARDED, error=why)


def _measure_block(trials: _Trials, items: list[Item]) -> None:
    """A block's items not measured before, on one server start; those a measurement left
    without a server to be measured on (it died, or the workload changed it), on another."""
    pending = [item for item in items if (item[1], item[2]) not in trials.finished]
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
    requested, config = prepared.points[items[0][1]]
    base = prepared.plans[prepared.label(requested)].base
    if prepared.blocked:
        settings = base
        start = _Start(trials, items, True, f"round {items[0][2]} start {number}")
    else:
        (item,) = items  # a restart is a block of one
        if item[1] in trials.refused:
            # The server refused this configuration before: it will again.
            trials.finish(item, None, {"status": TrialState.FAILED,
                                       "error": trials.refused[item[1]],
                                       "details": {"start_failed": True, "skipped": True}})
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
        if outcome["status"] == TrialState.DISCARDED:
            trials.discard(list(start.open.values()), outcome["error"])
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
    held: dict[Item, dict[str, Any]] = field(default_factory=dict)  # stored at close()
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
            varying = list(dict.fromkeys(n for _, i, _ in self.items
                                         for n in prepared.points[i][1]))
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
                    if outcome is None or outcome["status"] == TrialState.DISCARDED:
                        raise  # the run's fault, not this point's
                    del parts[item]
                    self._end(item, outcome)
                    if parts and self._lost(server, exc):
                        return
                    continue
                if number == passes - 1:
                    measured = workload.join(parts.pop(item)) if self.in_place \
                        else parts.pop(item)[0]
                    self._end(item, {"status": TrialState.DONE, "value": measured.value,
                                     "effective": effective[item], "details": measured.details})

    def _part(self, server: Server, item: Item, effective: dict[Item, Settings], first: bool
              ) -> Measured:
        """One part of the item's measurement (the whole of it, on its own start), its
        settings set in place first on a shared start, and read back the first time."""
        prepared = self.trials.prepared
        requested, config = prepared.points[item[1]]
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

    def _end(self, item: Item, outcome: dict[str, Any]) -> None:
        """The item's outcome, with what the start cost (on the first point done) and the
        block's name: stored now on a shared start, once the server stopped on its own."""
        details = dict(outcome.get("details", {}))
        if outcome["status"] == TrialState.DONE:
            details.update(self.costs)
            self.costs = {}
        if self.in_place:
            details["block"] = self.name
        outcome = {**outcome, "details": details}
        if self.in_place:
            self._store(item, outcome)
        else:
            self.held[item] = outcome  # its start is part of its trial

    def _store(self, item: Item, outcome: dict[str, Any]) -> None:
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


def _owner() -> dict[str, object]:
    """Which process measures a run: a run whose owner is gone was killed, not running."""
    return {"pid": os.getpid(), "host": socket.gethostname()}


def run_state(run: dict[str, Any]) -> str:
    """The run's status, with "killed" for a run left "running" by a process now gone."""
    owner = RunInfo.from_json(run["info"]).owner
    if run["status"] == RunStatus.RUNNING and owner.get("host") == socket.gethostname() and \
            not alive(owner.get("pid", 0)):
        return RunStatus.KILLED
    return str(run["status"])


def _trial_label(prepared: Prepared, point_idx: int) -> str:
    requested, _ = prepared.points[point_idx]
    step = prepared.steps[point_idx]
    if step is None:
        return ", ".join(f"{k}={v}" for k, v in requested.items())
    # what it is measured on: its server, machine, workload parameters (a slice each)
    on = [v for k, v in requested.items() if k == "binary" or k.startswith(MACHINE)
          or k in prepared.spec.workload.parameters]
    alone = " alone" if step["role"] == "alone" else ""
    return f"{', '.join(on) + ': ' if on else ''}step {step['step']}{alone} ({step['label']})"


def _workload_info(spec: Spec) -> dict[str, object]:
    work = spec.workload
    return {"kind": work.kind, **work.rounds.describe(), **work.describe()}


def _describe_data(prepared: Prepared) -> dict[str, object]:
    """The data of the run; with variants, each of them by its swept parameters."""
    work = prepared.spec.workload
    described = {}
    for requested, _ in prepared.points:
        dataset = work.dataset(requested)
        found = dataset.describe(prepared.datadirs.get(dataset.key))
        if found is None:
            return {}
        described[dataset.key] = found
    first = next(iter(described.values()))
    if len(described) == 1:
        return first
    return {**first, "rows": None, "bytes": None, "variants": list(described.values())}
