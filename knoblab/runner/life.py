"""A run's life: started, resumed or extended (only what is missing is measured), owned by
one process at a time (a lock with a heartbeat), its state read from its owner, and the
command that goes on from where it stopped."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

from knoblab import __version__
from knoblab.errors import UserError
from knoblab.machine import describe as describe_machine
from knoblab.runner.checks import (
    Listener,
    OpenTargets,
    describe_data,
    open_servers,
    prepare,
    workload_info,
)
from knoblab.runner.loop import execute
from knoblab.runner.wording import next_command, searches
from knoblab.server.sandbox import alive
from knoblab.spec import Spec, parse_spec
from knoblab.store import RunInfo, Store
from knoblab.units import format_duration
from knoblab.vocabulary import Design, RunStatus, StopReason
from knoblab.words import workload_changes
from knoblab.workloads.base import Rounds


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
            dataset=describe_data(prepared),
            tied=spec.tied,
            workload=workload_info(spec),
            steady=spec.workload.steady.to_json() if spec.workload.steady else None,
            statistics=spec.statistics,
            servers=prepared.describe_servers(),
            steps=prepared.steps if spec.steps else None,
            one_at_a_time=spec.one_at_a_time,
            unavailable={str(i): why for i, why in prepared.unavailable.items()},
            warnings=prepared.warnings,
            design={"name": Design.BLOCKED if prepared.blocked else Design.RESTARTS,
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
    if info.study is not None or searches(run["spec_source"]):
        study = f" of the tuning study {info.study}" if info.study else " of a tuning study"
        raise UserError(f"run {run_id} is a trial{study}: it is not resumed alone; run the "
                        f"study again with {next_command(run)}, which keeps its trials and "
                        "measures the rest")
    if budget is not None:
        if info.workload.get("repetitions") != "auto":
            raise UserError(f"--budget: run {run_id} has a fixed number of repetitions; a "
                            "budget applies only to repetitions = \"auto\"")
        spent = (info.stopped or {}).get("spent") or 0.0
        if info.stopped and info.stopped.get("reason") == StopReason.BUDGET and budget <= spent:
            raise UserError(f"--budget {format_duration(budget)}: run {run_id} has already "
                            f"measured for {format_duration(spent)}; give a larger budget")
    if run["status"] == RunStatus.DONE:
        stopped_by_budget = (info.stopped or {}).get("reason") == StopReason.BUDGET
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
    changed = workload_changes(info.workload, json.loads(json.dumps(workload_info(spec))))
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


def _owner() -> dict[str, object]:
    """Which process measures a run: a run whose owner is gone was killed, not running."""
    return {"pid": os.getpid(), "host": socket.gethostname()}
