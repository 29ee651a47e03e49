"""The experiment loop: validate, build the dataset once, then run every trial of the plan.

A trial is one server start with one configuration and one measurement (a query's median of its
timed runs, or one sysbench run), so repetitions of a point are spread over separate starts (a
start is itself a source of variance) and interleaved with the other points in a seeded
shuffled order (machines drift). Each trial is stored as soon as it ends; a run can be resumed
and only the missing trials are run.
"""

from __future__ import annotations

import random
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

import pymysql

from knoblab import safety
from knoblab.catalog import INTEGER_TYPES, Catalog
from knoblab.errors import UserError
from knoblab.observe import Observation, SecondSampler
from knoblab.server.binary import ServerBinary, find_binary
from knoblab.server.sandbox import (
    Sandbox,
    ServerStartError,
    catalog_for,
    derived_template,
    reap_orphans,
)
from knoblab.spec import Spec, Steady, parse_spec
from knoblab.store import SECOND_FIELDS, Store
from knoblab.timeseries import summarize_series
from knoblab.units import format_size
from knoblab.workloads.dataset import ScanTable
from knoblab.workloads.query import WorkloadError
from knoblab.workloads.sysbench import Second, SysbenchWorkload, histogram_percentile


class Listener(Protocol):
    def message(self, text: str) -> None: ...
    def dataset_progress(self, done: int, total: int) -> None: ...
    def plan(self, total: int, done: int, unit: str) -> None: ...
    def trial(self, label: str, repetition: int, status: str, value: float | None,
              error: str | None) -> None: ...
    def second(self, label: str, second: Second) -> None: ...


@dataclass
class Prepared:
    """Everything a run needs, checked: the binary, its catalog, the points, the dataset."""

    spec: Spec
    binary: ServerBinary
    catalog: Catalog
    base: dict[str, str]
    points: list[tuple[dict[str, str], dict[str, str]]]
    templates: dict[str, Path]  # datadir template by data key (one per dataset variant)

    def data_key(self, requested: dict[str, str]) -> str:
        if isinstance(self.spec.workload, SysbenchWorkload):
            return f"sysbench-{self.spec.workload.prepare_key()}"
        return self.spec.dataset_for(requested).key


def plan_order(n_points: int, repetitions: int, seed: int) -> list[tuple[int, int]]:
    """(point, repetition) pairs: every round visits each point once, in a shuffled order."""
    rng = random.Random(seed)
    order = []
    for repetition in range(repetitions):
        round_points = list(range(n_points))
        rng.shuffle(round_points)
        order += [(p, repetition) for p in round_points]
    return order


def prepare(spec: Spec, home: Path, listener: Listener) -> Prepared:
    reaped = reap_orphans(home)
    if reaped:
        listener.message(f"stopped {reaped} sandbox server(s) left behind by a killed knoblab")
    binary = find_binary(spec.binary)
    catalog = catalog_for(binary, home)
    base, points = spec.points(catalog)
    _check_settable(catalog, [*base, *points[0].config])
    safety.check([(p.requested, p.config) for p in points], base, catalog,
                 connections=lambda requested: _connections(spec, requested),
                 allow_durability_tradeoff=spec.allow_durability_tradeoff,
                 memory_budget=spec.memory_budget)
    templates: dict[str, Path] = {}
    if isinstance(spec.workload, SysbenchWorkload):
        statements = base.get("max_prepared_stmt_count",
                              catalog.knobs["max_prepared_stmt_count"].default)
        spec.workload.validate(max_prepared_stmt_count=int(statements))
        work = spec.workload
        listener.message(f"data: sysbench {work.tables} tables × {work.table_size:,} rows; "
                         "prepared once, then reused")
        key = f"sysbench-{work.prepare_key()}"
        templates[key] = derived_template(binary, key, work.prepare, home)
    else:
        variants = {spec.dataset_for(p.requested).key: spec.dataset_for(p.requested)
                    for p in points}
        for key, dataset in variants.items():
            listener.message(f"dataset: {dataset.table} ({_dataset_size(dataset)}, "
                             f"{dataset.engine}, slack {dataset.slack_type}); built once, "
                             "then reused")

            def build(server: Sandbox, dataset: ScanTable = dataset) -> None:
                dataset.build(server, listener.dataset_progress)

            templates[key] = derived_template(binary, key, build, home)
    return Prepared(spec, binary, catalog, base,
                    [(p.requested, p.config) for p in points], templates)


def start_run(spec: Spec, store: Store, home: Path, listener: Listener) -> str:
    prepared = prepare(spec, home, listener)
    knobs = list(prepared.points[0][0])
    defaults = {}
    for name in prepared.points[0][1]:
        default = prepared.catalog.knobs[name].default
        try:
            defaults[name] = prepared.catalog.knobs[name].normalize(default)
        except UserError:
            defaults[name] = default
    run_id = store.create_run(
        name=spec.name, kind="sweep", spec_source=spec.source,
        server_binary=str(prepared.binary.path), server_version=prepared.binary.short_version,
        info={
            "knobs": knobs, "defaults": defaults, "base": prepared.base,
            "dataset": _describe_data(prepared),
            "tied": spec.tied,
            "workload": {"kind": spec.kind, "repetitions": spec.repetitions,
                         **_workload_info(spec)},
            "steady": vars(spec.steady) if spec.steady else None,
            "statistics": vars(spec.statistics),
        },
        point_list=prepared.points,
    )
    listener.message(f"run {run_id}: {len(prepared.points)} points × {spec.repetitions} "
                     f"repetitions on {prepared.binary.short_version}")
    execute(run_id, prepared, store, listener)
    return run_id


def resume_run(run_id: str, store: Store, home: Path, listener: Listener) -> str:
    run = store.run(run_id)
    run_id = run["id"]
    if run["status"] == "done":
        listener.message(f"run {run_id} is already complete")
        return run_id
    spec = parse_spec(tomllib.loads(run["spec_source"]), run["spec_source"], run["name"])
    prepared = prepare(spec, home, listener)
    if prepared.points != store.points(run_id):
        raise UserError(f"run {run_id} cannot be resumed: its points no longer validate the same "
                        "way against this server")
    store.set_status(run_id, "running")
    execute(run_id, prepared, store, listener)
    return run_id


def execute(run_id: str, prepared: Prepared, store: Store, listener: Listener) -> None:
    spec = prepared.spec
    order = plan_order(len(prepared.points), spec.repetitions, spec.statistics.seed)
    store.discard_unfinished(run_id)
    finished = {(t.point_idx, t.repetition): t for t in store.trials(run_id)
                if t.status in ("done", "failed")}
    refused: dict[int, str] = {t.point_idx: t.error or "" for t in finished.values()
                               if t.status == "failed" and (t.details or {}).get("start_failed")}
    listener.plan(len(order), len(finished), "tps" if spec.kind == "sysbench" else "s")
    try:
        for position, (point_idx, repetition) in enumerate(order):
            if (point_idx, repetition) in finished:
                continue
            requested, config = prepared.points[point_idx]
            label = ", ".join(f"{k}={v}" for k, v in requested.items())
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
                    value, effective, details = run_trial(prepared, requested, config,
                                                          recorder)
                    outcome = {"status": "done", "value": value, "effective": effective,
                               "details": details}
                except ServerStartError as exc:
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
              recorder: TrialRecorder) -> tuple[float, dict[str, str], dict[str, object]]:
    """Start a sandbox with the base settings plus this point's, measure once, stop it."""
    catalog = prepared.catalog
    workload = prepared.spec.workload
    settings = {**prepared.base, **config}
    at_start = {k: v for k, v in settings.items() if catalog.knobs[k].startup_option}
    after_start = {k: v for k, v in settings.items() if k not in at_start}
    session_knobs = [k for k in settings if catalog.knobs[k].scope == "SESSION"]
    template = prepared.templates[prepared.data_key(requested)]
    dataset = prepared.spec.dataset_for(requested)
    with Sandbox(prepared.binary, template, at_start) as server:
        if after_start:
            conn = server.connect()
            try:
                with conn.cursor() as cur:
                    for name, value in after_start.items():
                        # Names come from the catalog; values are bound, never spliced.
                        literal = int(value) if catalog.knobs[name].type in INTEGER_TYPES else value
                        cur.execute(f"SET GLOBAL {name} = %s", (literal,))
            finally:
                conn.close()
        effective = server.global_values(list(settings))
        if isinstance(workload, SysbenchWorkload):
            threads = int(requested.get("threads", workload.threads))
            value, details = _run_sysbench(prepared.spec, server, threads, recorder)
        else:
            # The OS figures of every second, warm-up included: long queries get their vmstat.
            with SecondSampler(server.pid) as sampler:
                measurement = workload.measure(server, dataset.files(server.datadir),
                                               session_knobs)
            recorder.os_seconds(sampler.take())
            value, details = measurement.seconds, {**measurement.details,
                                                   "rows": measurement.rows}
        details.update(copy_seconds=round(server.copy_seconds, 3),
                       start_seconds=round(server.start_seconds, 3))
    return value, effective, details


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
    return {"sql": work.sql, "cache": work.cache, "timed_runs": work.timed_runs}


def _connections(spec: Spec, requested: dict[str, str]) -> int:
    """Connections a point's workload opens, plus knoblab's own for counters and settings."""
    if isinstance(spec.workload, SysbenchWorkload):
        return int(requested.get("threads", spec.workload.threads)) + 2
    return 2


def _check_settable(catalog: Catalog, names: list[str]) -> None:
    for name in names:
        knob = catalog.knobs[name]
        if not knob.startup_option and not knob.dynamic:
            raise UserError(f"{name} can be neither set at start-up nor changed at run time "
                            f"on {catalog.server_version}; it cannot be tuned")


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
        described[dataset.key] = dataset.describe(prepared.templates[dataset.key])
    first = next(iter(described.values()))
    if len(described) == 1:
        return first
    return {**first, "rows": None, "bytes": None, "variants": list(described.values())}
