"""The experiment loop: validate, build the dataset once, then run every trial of the plan.

A trial is one server start with one configuration and one measurement (a query's median of its
timed runs, or one sysbench run), so repetitions of a point are spread over separate starts (a
start is itself a source of variance) and interleaved with the other points in a seeded
shuffled order (machines drift). Each trial is stored as soon as it ends; a run can be resumed
and only the missing trials are run.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import pymysql

from knoblab import safety
from knoblab.catalog import Catalog
from knoblab.errors import UserError
from knoblab.observe import Observation, SecondSampler
from knoblab.server.binary import ServerBinary, compile_info, find_binary
from knoblab.server.external import (
    ExternalServer,
    ServerRefused,
    Settings,
    check_include,
    ensure_data,
    restoring,
    set_global,
)
from knoblab.server.sandbox import (
    Sandbox,
    ServerStartError,
    alive,
    catalog_for,
    derived_template,
    reap_orphans,
)
from knoblab.spec import SWEEPABLE, Point, Spec, Steady, parse_spec
from knoblab.store import SECOND_FIELDS, Store
from knoblab.timeseries import summarize_series
from knoblab.units import format_size
from knoblab.workloads.dataset import DATABASE, ScanTable
from knoblab.workloads.query import QueryWorkload, WorkloadError
from knoblab.workloads.script import ScriptWorkload
from knoblab.workloads.sysbench import Second, SysbenchWorkload, histogram_percentile


class Listener(Protocol):
    def message(self, text: str) -> None: ...
    def dataset_progress(self, done: int, total: int) -> None: ...
    def plan(self, total: int, done: int, unit: str) -> None: ...
    def trial(self, label: str, repetition: int, status: str, value: float | None,
              error: str | None) -> None: ...
    def second(self, label: str, second: Second) -> None: ...


@dataclass
class Target:
    """One server under test: a binary knoblab starts sandboxes of, or a running server."""

    label: str  # "" when only one server is measured
    binary: ServerBinary | None
    catalog: Catalog
    external: ExternalServer | None = None
    base: dict[str, str] = field(default_factory=dict)
    lacking: list[str] = field(default_factory=list)  # settings of the spec it does not have
    templates: dict[str, Path] = field(default_factory=dict)  # datadir template by data key

    @property
    def version(self) -> str:
        return self.binary.short_version if self.binary else self.catalog.server_version

    def describe(self) -> dict[str, object]:
        if self.binary is None:
            assert self.external is not None
            return {"label": self.label, "binary": None,
                    "endpoint": self.external.endpoint.describe(), "version": self.version,
                    "version_line": self.version, "compile": {}, "missing": self.lacking,
                    "error": None}
        return {"label": self.label, "binary": str(self.binary.path),
                "version": self.version, "version_line": self.binary.version,
                "compile": compile_info(self.binary), "missing": self.lacking, "error": None}


@dataclass
class Prepared:
    """Everything a run needs, checked: the servers, the points, the datasets."""

    spec: Spec
    targets: dict[str, Target]
    points: list[tuple[dict[str, str], dict[str, str]]]
    steps: list[dict[str, object] | None]  # per point, its step (steps experiments)
    unavailable: dict[int, str]  # points not run, and why (a step that changes nothing here)
    left_out: dict[str, str]  # servers that could not be used, and why
    warnings: list[str]

    def target(self, requested: dict[str, str]) -> Target:
        return self.targets[requested.get("binary", "")]

    def data_key(self, requested: dict[str, str]) -> str:
        work = self.spec.workload
        if isinstance(work, SysbenchWorkload):
            return f"sysbench-{work.prepare_key()}"
        if isinstance(work, ScriptWorkload):
            return work.prepare_key()
        return self.spec.dataset_for(requested).key

    def describe_servers(self) -> list[dict[str, object]]:
        described = [t.describe() for t in self.targets.values()]
        for label, error in self.left_out.items():
            binary = self.spec.servers.get(label, "")
            described.append({"label": label, "binary": binary, "version": None,
                              "version_line": None, "compile": {}, "missing": [],
                              "error": error})
        return described


def plan_order(n_points: int, repetitions: int, seed: int) -> list[tuple[int, int]]:
    """(point, repetition) pairs: every round visits each point once, in a shuffled order."""
    rng = random.Random(seed)
    order = []
    for repetition in range(repetitions):
        round_points = list(range(n_points))
        rng.shuffle(round_points)
        order += [(p, repetition) for p in round_points]
    return order


def prepare(spec: Spec, home: Path, listener: Listener, store: Store,
            resuming: str | None = None) -> Prepared:
    reaped = reap_orphans(home)
    if reaped:
        listener.message(f"stopped {reaped} sandbox server(s) left behind by a killed knoblab")
    targets, left_out = _targets(spec, home, listener)
    per_target = _points_per_target(spec, targets)
    points: list[tuple[dict[str, str], dict[str, str]]] = []
    steps: list[dict[str, object] | None] = []
    unavailable: dict[int, str] = {}
    warnings: list[str] = []
    for label, (target_points, target_warnings) in per_target.items():
        where = f" on {label}" if label else ""
        warnings += [f"{w}{where}" for w in target_warnings]
        for point in target_points:
            requested = {"binary": label, **point.requested} if label else point.requested
            if point.step and point.step.get("skip"):
                unavailable[len(points)] = str(point.step["skip"])
            points.append((requested, point.config))
            steps.append(point.step)
    prepared = Prepared(spec, targets, points, steps, unavailable, left_out, warnings)
    for target in targets.values():
        mine = [p for i, p in enumerate(points)
                if prepared.target(p[0]) is target and i not in unavailable]
        names = list(dict.fromkeys([*target.base, *(n for _, c in mine for n in c)]))
        _check_settable(target.catalog, names)
        _check_not_fixed(target.catalog, [{**target.base, **c} for _, c in mine])
        if target.external is not None:
            _check_external(spec, prepared, target, names, store, resuming)
        else:
            safety.check_sandbox_owned(names)
        # The memory budget is this machine's: it says nothing about a server elsewhere.
        local = target.external is None or target.external.pid is not None
        safety.check(mine, target.base, target.catalog,
                     connections=lambda requested: _connections(spec, requested),
                     allow_durability_tradeoff=spec.allow_durability_tradeoff,
                     memory_budget=spec.memory_budget,
                     check_memory=local or spec.memory_budget is not None)
    for warning in warnings:
        listener.message(f"warning: {warning}")
    for target in targets.values():
        _build_templates(prepared, target, home, listener)
    return prepared


def _targets(spec: Spec, home: Path, listener: Listener
             ) -> tuple[dict[str, Target], dict[str, str]]:
    """The servers to measure. With several, one that cannot be used is left out with its
    reason and the others still run; with one, its problem is the run's error."""
    if spec.external is not None:
        server = ExternalServer(spec.external)
        server.probe()
        return {"": Target("", None, server.catalog(), external=server)}, {}
    if not spec.servers:
        binary = find_binary(spec.binary)
        return {"": Target("", binary, catalog_for(binary, home))}, {}
    targets, left_out = {}, {}
    for label, name in spec.servers.items():
        try:
            binary = find_binary(name)
            targets[label] = Target(label, binary, catalog_for(binary, home))
        except UserError as exc:
            left_out[label] = str(exc)
    if not targets:
        raise UserError("no server could be used: " +
                        "; ".join(f"{label}: {why}" for label, why in left_out.items()))
    for label, why in left_out.items():
        listener.message(f"server {label} is left out: {why}")
    if len(targets) == 1:
        listener.message(f"warning: only {next(iter(targets))} is left; nothing to compare it "
                         "with")
    for target in targets.values():
        listener.message(f"server {target.label}: {target.version} ({target.binary.path})")
    return targets, left_out


def _points_per_target(spec: Spec, targets: dict[str, Target]
                       ) -> dict[str, tuple[list[Point], list[str]]]:
    """Each server's points, validated against its own catalog. A setting no server has is
    an error (a typo, most likely); one that only some lack is left out on those."""
    names = spec.setting_names()
    for target in targets.values():
        target.lacking = [n for n in names if not _has(target.catalog, n)]
    for name in names:
        if all(name in t.lacking for t in targets.values()):
            next(iter(targets.values())).catalog.knob(name)  # raises, with suggestions
    swept = [n for n in spec.sweep if n not in SWEEPABLE[spec.kind]]
    complete = [t for t in targets.values() if not set(swept) & set(t.lacking)]
    if not complete:
        raise UserError("no server compared has all the swept settings "
                        f"({', '.join(swept)}); sweep settings they share")
    reference = None
    per_target = {}
    for target in [*complete, *(t for t in targets.values() if t not in complete)]:
        if target in complete:
            target.base, points, warnings = spec.points(target.catalog,
                                                        frozenset(target.lacking))
            reference = reference or points
        else:
            # A swept setting this server lacks: its points are kept, and not run.
            lacks = ", ".join(n for n in swept if n in target.lacking)
            target.base = spec.base_settings(target.catalog, frozenset(target.lacking))
            points = [Point(p.requested, {}, {"skip": f"not on this server: {lacks}"})
                      for p in reference]
            warnings = []
        per_target[target.label] = (points, warnings)
    return {label: per_target[label] for label in targets}


def _check_external(spec: Spec, prepared: Prepared, target: Target, names: list[str],
                    store: Store, resuming: str | None) -> None:
    """What a running server allows: settings changed at run time, data in knoblab's own
    database, nothing left changed by an earlier run."""
    server = target.external
    assert server is not None
    where = server.endpoint.describe()
    for row in store.pending_restores():
        # Another run's changes would be taken for this server's originals; a resumed run
        # takes its own originals from the store.
        if row["server"] == server.endpoint.as_dict() and row["run_id"] != resuming:
            raise UserError(f"run {row['run_id']} left {row['name']} changed on {where}; put "
                            f"it back first with: knoblab restore {row['run_id']}")
    restart = [n for n in names if not target.catalog.knobs[n].dynamic]
    if restart and not (server.endpoint.restart_command and server.endpoint.config_include):
        raise UserError(f"{', '.join(restart)} can only be set at start-up: to let knoblab "
                        f"restart {where} give [server] restart_command (e.g. [\"systemctl\", "
                        "\"restart\", \"mariadb\"]) and config_include (a file its "
                        "configuration includes, which knoblab owns), or measure them on "
                        "sandbox servers")
    if restart:
        check_include(server.endpoint)
    if isinstance(spec.workload, SysbenchWorkload):
        raise UserError("sysbench runs need a sandbox server: on a running server its tables "
                        "and passwords would live outside knoblab's own database; use kind = "
                        "\"query\" or \"script\", or remove [server] kind")
    if isinstance(spec.workload, QueryWorkload) and spec.workload.cache == "cold" and \
            server.datadir is None:
        raise UserError(f"cache = \"cold\" needs the server's files on this machine to evict "
                        f"them, and {where}'s data directory is not here; use cache = \"warm\"")
    variants = {prepared.data_key(r) for r, _ in prepared.points}
    if len(variants) > 1:
        raise UserError("a running server holds one dataset at a time; sweep rows, engine or "
                        "slack_type on sandbox servers")


def _has(catalog: Catalog, name: str) -> bool:
    try:
        catalog.knob(name)
    except UserError:
        return False
    return True


def _build_templates(prepared: Prepared, target: Target, home: Path,
                     listener: Listener) -> None:
    spec = prepared.spec
    on = f" for {target.label}" if target.label else ""
    work = spec.workload
    if target.external is not None:
        key = prepared.data_key(prepared.points[0][0])
        if isinstance(work, ScriptWorkload):
            build = work.prepare
        else:
            dataset = spec.dataset_for(prepared.points[0][0])

            def build(server: ExternalServer) -> None:
                dataset.build(server, listener.dataset_progress)
        listener.message(f"data: in database {DATABASE} on "
                         f"{target.external.endpoint.describe()}, which knoblab owns")
        ensure_data(target.external, key, build)
        return
    if isinstance(work, SysbenchWorkload):
        statements = target.base.get(
            "max_prepared_stmt_count", target.catalog.knobs["max_prepared_stmt_count"].default)
        work.validate(max_prepared_stmt_count=int(statements))
        listener.message(f"data{on}: sysbench {work.tables} tables × {work.table_size:,} rows; "
                         "prepared once, then reused")
        key = prepared.data_key({})
        target.templates[key] = derived_template(target.binary, key, work.prepare,
                                                 home)
        return
    if isinstance(work, ScriptWorkload):
        key = prepared.data_key({})
        target.templates[key] = derived_template(target.binary, key, work.prepare, home)
        # Said after it worked: a setup error is then the only line a bad script gets.
        listener.message(f"data{on}: the script's setup, run once into a template, reused")
        return
    variants = {spec.dataset_for(r).key: spec.dataset_for(r) for r, _ in prepared.points}
    for key, dataset in variants.items():
        listener.message(f"dataset{on}: {dataset.table} ({_dataset_size(dataset)}, "
                         f"{dataset.engine}, slack {dataset.slack_type}); built once, "
                         "then reused")

        def build(server: Sandbox, dataset: ScanTable = dataset) -> None:
            dataset.build(server, listener.dataset_progress)

        target.templates[key] = derived_template(target.binary, key, build,
                                                 home)


def start_run(spec: Spec, store: Store, home: Path, listener: Listener) -> str:
    prepared = prepare(spec, home, listener, store)
    first = next(iter(prepared.targets.values()))
    if spec.steps:
        knobs = list(dict.fromkeys(k for r, _ in prepared.points for k in r))
    else:
        knobs = list(prepared.points[0][0])
    defaults = {}
    for name in dict.fromkeys(n for _, config in prepared.points for n in config):
        knob = first.catalog.knobs.get(name)
        if knob is not None:
            defaults[name] = knob.default_value()
    if first.external is not None:
        # On a running server the baseline is what it runs now, not the compiled-in default.
        defaults = first.external.global_values(list(defaults))
    targets = list(prepared.targets.values())
    versions = ", ".join(dict.fromkeys(t.version for t in targets))
    run_id = store.create_run(
        name=spec.name, kind=spec.experiment, spec_source=spec.source,
        server_binary=", ".join(str(t.binary.path) if t.binary else
                                t.external.endpoint.describe() for t in targets),
        server_version=versions,
        info={
            "knobs": knobs, "defaults": defaults, "base": first.base,
            "dataset": _describe_data(prepared),
            "tied": spec.tied,
            "workload": {"kind": spec.kind, "repetitions": spec.repetitions,
                         **_workload_info(spec)},
            "steady": vars(spec.steady) if spec.steady else None,
            "statistics": vars(spec.statistics),
            "servers": prepared.describe_servers(),
            "steps": prepared.steps if spec.steps else None,
            "one_at_a_time": spec.one_at_a_time,
            "unavailable": {str(i): why for i, why in prepared.unavailable.items()},
            "warnings": prepared.warnings,
            "spec_dir": str(spec.base_dir) if spec.base_dir else None,
            "owner": _owner(),
        },
        point_list=prepared.points,
    )
    listener.message(f"run {run_id}: {len(prepared.points)} points × {spec.repetitions} "
                     f"repetitions on {versions}")
    execute(run_id, prepared, store, listener)
    return run_id


def resume_run(run_id: str, store: Store, home: Path, listener: Listener) -> str:
    run = store.run(run_id)
    run_id = run["id"]
    if run["status"] == "done":
        listener.message(f"run {run_id} is already complete")
        return run_id
    owner = run["info"].get("owner") or {}
    if run["status"] == "running" and owner.get("host") == socket.gethostname() and \
            owner.get("pid") != os.getpid() and alive(owner.get("pid", 0)):
        raise UserError(f"run {run_id} is still being measured by process {owner['pid']}; "
                        "wait for it, or stop it (Ctrl-C) and resume then")
    store.update_info(run_id, owner=_owner())
    spec_dir = run["info"].get("spec_dir")
    spec = parse_spec(tomllib.loads(run["spec_source"]), run["spec_source"], run["name"],
                      base_dir=Path(spec_dir) if spec_dir else None)
    prepared = prepare(spec, home, listener, store, resuming=run_id)
    if prepared.points != store.points(run_id):
        raise UserError(f"run {run_id} cannot be resumed: its points no longer validate the same "
                        "way against this server")
    workload = {"kind": spec.kind, "repetitions": spec.repetitions, **_workload_info(spec)}
    if json.loads(json.dumps(workload)) != run["info"].get("workload"):
        raise UserError(f"run {run_id} cannot be resumed: its workload changed since it began "
                        "(a script file edited?); start a new run")
    store.set_status(run_id, "running")
    execute(run_id, prepared, store, listener)
    return run_id


def execute(run_id: str, prepared: Prepared, store: Store, listener: Listener) -> None:
    spec = prepared.spec
    # Points that cannot run here (a step that changes nothing, a setting the server lacks)
    # are not planned at all: their place in the results says why.
    order = [(p, r) for p, r in plan_order(len(prepared.points), spec.repetitions,
                                           spec.statistics.seed)
             if p not in prepared.unavailable]
    store.discard_unfinished(run_id)
    finished = {(t.point_idx, t.repetition): t for t in store.trials(run_id)
                if t.status in ("done", "failed")}
    refused: dict[int, str] = {t.point_idx: t.error or "" for t in finished.values()
                               if t.status == "failed" and (t.details or {}).get("start_failed")}
    listener.plan(len(order), len(finished), "tps" if spec.kind == "sysbench" else "s")
    target = next(iter(prepared.targets.values()))  # a running server is the only target
    settings = None
    if target.external is not None:
        touched = list(dict.fromkeys([*target.base, *(n for _, c in prepared.points
                                                        for n in c)]))
        settings = Settings(target.external, target.catalog, store, run_id, touched)
    try:
        with restoring(settings) if settings else contextlib.nullcontext():
            _run_plan(run_id, prepared, store, listener, order, finished, refused, settings)
    except KeyboardInterrupt:
        store.set_status(run_id, "interrupted", "interrupted by the user")
        raise
    except UserError as exc:
        store.set_status(run_id, "failed", str(exc))
        raise
    except BaseException as exc:
        store.set_status(run_id, "failed", f"{type(exc).__name__}: {exc}")
        raise
    store.set_status(run_id, "done")


def _run_plan(run_id: str, prepared: Prepared, store: Store, listener: Listener,
              order: list[tuple[int, int]], finished: dict, refused: dict[int, str],
              settings: Settings | None) -> None:
    for position, (point_idx, repetition) in enumerate(order):
        if (point_idx, repetition) in finished:
            continue
        requested, config = prepared.points[point_idx]
        label = _trial_label(prepared, point_idx)
        trial_id = store.begin_trial(run_id, point_idx=point_idx, repetition=repetition,
                                     position=position)
        outcome: dict[str, object]
        if point_idx in refused:
            # The server refused this configuration before: it will again.
            outcome = {"status": "failed", "error": refused[point_idx],
                       "details": {"start_failed": True, "skipped": True}}
        else:
            recorder = TrialRecorder(store, listener, trial_id, label)
            try:
                value, effective, details = run_trial(prepared, requested, config, recorder,
                                                      settings)
                outcome = {"status": "done", "value": value, "effective": effective,
                           "details": details}
            except (ServerStartError, ServerRefused) as exc:
                refused[point_idx] = str(exc)
                outcome = {"status": "failed", "error": str(exc),
                           "details": {"start_failed": True}}
            except (WorkloadError, pymysql.MySQLError) as exc:
                # The server died or refused mid-measurement: the run goes on.
                error = str(exc) if isinstance(exc, WorkloadError) else f"server error: {exc}"
                outcome = {"status": "failed", "error": error}
            except KeyboardInterrupt:
                store.finish_trial(trial_id, status="discarded", error="interrupted")
                raise
        store.finish_trial(trial_id, **outcome)
        listener.trial(label, repetition, outcome["status"], outcome.get("value"),
                       outcome.get("error"))


def _owner() -> dict[str, object]:
    """Which process measures a run: a run whose owner is gone was killed, not running."""
    return {"pid": os.getpid(), "host": socket.gethostname()}


def run_state(run: dict) -> str:
    """The run's status, with "killed" for a run left "running" by a process now gone."""
    owner = run["info"].get("owner") or {}
    if run["status"] == "running" and owner.get("host") == socket.gethostname() and \
            not alive(owner.get("pid", 0)):
        return "killed"
    return run["status"]


def _trial_label(prepared: Prepared, point_idx: int) -> str:
    requested, _ = prepared.points[point_idx]
    step = prepared.steps[point_idx]
    if step is None:
        return ", ".join(f"{k}={v}" for k, v in requested.items())
    on = f"{requested['binary']}: " if "binary" in requested else ""
    alone = " alone" if step["role"] == "alone" else ""
    return f"{on}step {step['step']}{alone} ({step['label']})"


@dataclass
class TrialRecorder:
    """Stores what a running trial reports each second (workload and OS), as it arrives."""

    store: Store
    listener: Listener
    trial_id: int
    label: str

    def second(self, second: Second) -> None:
        self.store.add_second(self.trial_id, second.t,
                              **{f: getattr(second, f) for f in SECOND_FIELDS})
        self.listener.second(self.label, second)

    def os_seconds(self, samples: list[tuple[float, dict[str, float]]]) -> None:
        for t, figures in samples:
            self.store.add_os_second(self.trial_id, t, figures)


def run_trial(prepared: Prepared, requested: dict[str, str], config: dict[str, str],
              recorder: TrialRecorder, changer: Settings | None = None
              ) -> tuple[float, dict[str, str], dict[str, object]]:
    """One measurement with the base settings plus this point's: on a sandbox started for it
    (and stopped after), or on the running server with its settings changed in place."""
    target = prepared.target(requested)
    catalog = target.catalog
    settings = {**target.base, **config}
    if target.external is not None:
        assert changer is not None
        server = target.external
        if isinstance(prepared.spec.workload, ScriptWorkload):
            # The script writes: every measurement starts from freshly set-up tables.
            ensure_data(server, prepared.data_key(requested), prepared.spec.workload.prepare,
                        fresh=True)
        changer.apply(settings)
        return _measure(prepared, requested, server, settings, recorder)
    at_start = {k: v for k, v in settings.items() if catalog.knobs[k].startup_option}
    after_start = {k: v for k, v in settings.items() if k not in at_start}
    template = target.templates[prepared.data_key(requested)]
    with Sandbox(target.binary, template, at_start) as server:
        if after_start:
            conn = server.connect()
            try:
                with conn.cursor() as cur:
                    for name, value in after_start.items():
                        set_global(cur, catalog, name, value)
            finally:
                conn.close()
        value, effective, details = _measure(prepared, requested, server, settings, recorder)
        details.update(copy_seconds=round(server.copy_seconds, 3),
                       start_seconds=round(server.start_seconds, 3))
    return value, effective, details


def _measure(prepared: Prepared, requested: dict[str, str], server: Sandbox | ExternalServer,
             settings: dict[str, str], recorder: TrialRecorder
             ) -> tuple[float, dict[str, str], dict[str, object]]:
    catalog = prepared.target(requested).catalog
    workload = prepared.spec.workload
    session_knobs = [k for k in settings if catalog.knobs[k].scope == "SESSION"]
    effective = server.global_values(list(settings))
    if isinstance(workload, SysbenchWorkload):
        threads = int(requested.get("threads", workload.threads))
        value, details = _run_sysbench(prepared.spec, server, threads, recorder)
        return value, effective, details
    # The OS figures of every second, warm-up included: long runs get their vmstat.
    with SecondSampler(server.pid) as sampler:
        if isinstance(workload, ScriptWorkload):
            measurement = workload.measure(server)
        else:
            dataset = prepared.spec.dataset_for(requested)
            files = dataset.files(server.datadir) if server.datadir else []
            measurement = workload.measure(server, files, session_knobs)
    recorder.os_seconds(sampler.take())
    return measurement.seconds, effective, {**measurement.details, "rows": measurement.rows}


def _run_sysbench(spec: Spec, server: Sandbox, threads: int,
                  recorder: TrialRecorder) -> tuple[float, dict[str, object]]:
    """One sysbench run; the trial's value is its steady-state mean throughput."""
    with Observation(server) as seen, SecondSampler(server.pid) as sampler:
        def on_second(second: Second) -> None:
            recorder.second(second)
            recorder.os_seconds(sampler.take())

        result = spec.workload.run(server, on_second, threads=threads)
    recorder.os_seconds(sampler.take())
    if result.error is not None or not result.seconds:
        # The seconds already stored stay with the trial, marked failed.
        raise WorkloadError(f"sysbench failed after {len(result.seconds)} s: "
                            f"{result.error or 'no per-second report'}")
    steady = spec.steady or Steady()
    series = summarize_series([s.tps for s in result.seconds], warmup=steady.warmup,
                              last=steady.window, stall_fraction=steady.stall_fraction)
    summary = result.summary
    details: dict[str, object] = {
        "threads": threads, "steady": asdict(series), **seen.result,
        "errors": sum(s.errors for s in result.seconds),
        "reconnects": sum(s.reconnects for s in result.seconds),
    }
    if summary is not None:
        details.update(
            transactions=summary.transactions, sysbench_tps=summary.tps,
            latency_avg_ms=summary.latency_avg_ms, latency_max_ms=summary.latency_max_ms,
            latency_p95_ms=histogram_percentile(summary.histogram, 95)
            if summary.histogram else None,
            latency_p99_ms=histogram_percentile(summary.histogram, 99)
            if summary.histogram else None,
        )
    return series.mean, details


def _workload_info(spec: Spec) -> dict[str, object]:
    work = spec.workload
    if isinstance(work, SysbenchWorkload):
        return {"test": work.test, "threads": work.threads, "tables": work.tables,
                "table_size": work.table_size, "rand_type": work.rand_type,
                "duration": work.duration, "rate": work.rate, "options": dict(work.options)}
    if isinstance(work, ScriptWorkload):
        return work.describe()
    return {"sql": work.sql, "cache": work.cache, "timed_runs": work.timed_runs}


def _connections(spec: Spec, requested: dict[str, str]) -> int:
    """Connections a point's workload opens, plus knoblab's own for counters and settings."""
    if isinstance(spec.workload, SysbenchWorkload):
        return int(requested.get("threads", spec.workload.threads)) + 2
    if isinstance(spec.workload, ScriptWorkload):
        return spec.workload.connections + 2
    return 2


def _check_settable(catalog: Catalog, names: list[str]) -> None:
    for name in names:
        knob = catalog.knobs[name]
        if not knob.startup_option and not knob.dynamic:
            raise UserError(f"{name} can be neither set at start-up nor changed at run time "
                            f"on {catalog.server_version}; it cannot be tuned")


# Settings written into the data files when a data directory is created: a server started on
# a datadir made with another value refuses to start, so no sweep can vary them.
FIXED_AT_CREATION = ("innodb_page_size", "lower_case_table_names", "innodb_data_file_path")


def _check_not_fixed(catalog: Catalog, configs: list[dict[str, str]]) -> None:
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


def _dataset_size(dataset: ScanTable) -> str:
    if dataset.rows is not None:
        return f"{dataset.rows:,} rows"
    return f"{format_size(dataset.size_bytes)}B"


def _describe_data(prepared: Prepared) -> dict[str, object]:
    """The dataset of the run; with variants, each of them by its swept parameters."""
    spec = prepared.spec
    if spec.dataset is None:
        return {}
    described = {}
    for requested, _ in prepared.points:
        dataset = spec.dataset_for(requested)
        target = next(iter(prepared.targets.values()))
        datadir = target.external.datadir if target.external else target.templates[dataset.key]
        described[dataset.key] = dataset.describe(datadir)
    first = next(iter(described.values()))
    if len(described) == 1:
        return first
    return {**first, "rows": None, "bytes": None, "variants": list(described.values())}
