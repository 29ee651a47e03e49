"""Before a run measures anything: its spec checked against each server's catalog and the
machine (settings that exist and can be set, nothing fixed at creation, a budget its first
rounds fit, connections the server allows), the points planned per server, the design chosen
(a start per measurement, or points sharing one), and the data built once."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import shlex
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pymysql

from knoblab import safety, stats
from knoblab.catalog import Catalog
from knoblab.connection import Progress, Server
from knoblab.datasets import Dataset
from knoblab.errors import BudgetTooShort, UserError
from knoblab.runner.wording import point_text, spec_file
from knoblab.seconds import Second
from knoblab.server import Data, Target
from knoblab.server.sandbox import alive, other_owners, reap_orphans
from knoblab.server.settings import set_globals
from knoblab.server.shape import Shape
from knoblab.spec import MACHINE, Point, Spec
from knoblab.store import Store
from knoblab.units import format_duration
from knoblab.vocabulary import Design, StepRole
from knoblab.workloads import Workload

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
        found = spec_file(spec.source, spec.base_dir)
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
    warnings += [*spec.workload.warnings, *few_rounds(spec), *_disturbances(home, store)]
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
    if asked == Design.RESTARTS:
        return False, "a server start per measurement, as the spec asks (design = \"restarts\")"
    machine = [name for name in spec.sweep if name.startswith(MACHINE)]
    if machine:
        why = f"{machine[0]} is the sandbox's machine, given when it starts"
        if asked == Design.BLOCKED:
            raise UserError(f"[workload] design = \"blocked\": {why}; use design = "
                            "\"restarts\" (or \"auto\") for it")
        return False, f"a server start per measurement: {why}"
    if restart_only:
        why = (f"{restart_only[0]} takes effect only at a server start"
               + (f" (so do {', '.join(restart_only[1:])})" if restart_only[1:] else ""))
        if asked == Design.BLOCKED:
            raise UserError(f"[workload] design = \"blocked\": {why}; use design = "
                            "\"restarts\" (or \"auto\") for it")
        return False, f"a server start per measurement: {why}"
    if spec.workload.writes_data:
        why = "the workload changes its data, so each measurement needs a fresh copy"
        if asked == Design.BLOCKED:
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


def few_rounds(spec: Spec) -> list[str]:
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
            label = point_text(requested) or "the base configuration"
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


def trial_label(prepared: Prepared, point_idx: int) -> str:
    requested, _ = prepared.points[point_idx]
    step = prepared.steps[point_idx]
    if step is None:
        return ", ".join(f"{k}={v}" for k, v in requested.items())
    # what it is measured on: its server, machine, workload parameters (a slice each)
    on = [v for k, v in requested.items() if k == "binary" or k.startswith(MACHINE)
          or k in prepared.spec.workload.parameters]
    alone = " alone" if step["role"] == StepRole.ALONE else ""
    return f"{', '.join(on) + ': ' if on else ''}step {step['step']}{alone} ({step['label']})"


def workload_info(spec: Spec) -> dict[str, object]:
    work = spec.workload
    return {"kind": work.kind, **work.rounds.describe(), **work.describe()}


def describe_data(prepared: Prepared) -> dict[str, object]:
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
