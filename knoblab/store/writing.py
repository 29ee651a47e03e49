"""The store's write side: runs and studies created, each trial as it starts and ends, each
second as it comes, a run's status and lock, the settings changed on a running server."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import sqlalchemy as sa

from knoblab.errors import RunBusy, UserError
from knoblab.store.base import Connected
from knoblab.store.rows import RunInfo
from knoblab.store.schema import (
    OS_FIELDS,
    _create_tables,
    os_seconds,
    points,
    run_locks,
    runs,
    saved_settings,
    seconds,
    studies,
    study_key,
    study_metadata,
    trials,
)
from knoblab.store.urls import storable
from knoblab.vocabulary import Experiment, RunStatus, SavedState, TrialState


class Writes(Connected):
    """What the store writes: each write its own transaction, so what was stored stays."""

    def create_run(self, *, name: str, experiment: Experiment, spec_source: str,
                   server_binary: str, server_version: str, info: RunInfo,
                   point_list: list[tuple[dict[str, str], dict[str, str]]]) -> str:
        run_id = uuid.uuid4().hex[:8]
        if self._study is not None:
            info = replace(info, study=self._study)

        def work(conn: sa.Connection) -> None:
            conn.execute(runs.insert().values(
                id=run_id, name=name, kind=experiment, status=RunStatus.RUNNING,
                created_at=time.time(), host=socket.gethostname(), spec_source=spec_source,
                server_binary=server_binary, server_version=server_version,
                info=json.dumps(info.to_json()),
            ))
            if point_list:  # a capture has none
                conn.execute(points.insert(), [
                    {"run_id": run_id, "idx": i, "requested": json.dumps(req),
                     "config": json.dumps(cfg)}
                    for i, (req, cfg) in enumerate(point_list)
                ])
        self._tx(work)
        return run_id

    @contextlib.contextmanager
    def measuring_for(self, study: str) -> Iterator[None]:
        """Every run created meanwhile is one of the study's: `knoblab runs` shows the study,
        and its runs only when asked (--study)."""
        before, self._study = self._study, study
        try:
            yield
        finally:
            self._study = before

    def save_study(self, name: str, *, status: RunStatus, spec_source: str,
                   info: dict[str, Any], result: dict[str, Any] | None = None,
                   error: str | None = None) -> None:
        """The study's row, made or brought up to date; its first start is kept."""
        _create_tables(self.engine, study_metadata)
        key = study_key(name)
        now = time.time()
        values = {"name": name, "status": status, "updated_at": now, "host": socket.gethostname(),
                  "spec_source": spec_source, "info": json.dumps(info),
                  "finished_at": None if status == RunStatus.RUNNING else now, "error": error}
        if result is not None:
            values["result"] = json.dumps(result)

        def work(conn: sa.Connection) -> None:
            found = conn.execute(sa.select(studies.c.id).where(studies.c.id == key)).first()
            if found is None:
                conn.execute(studies.insert().values(id=key, created_at=now, **values))
            else:
                conn.execute(studies.update().where(studies.c.id == key).values(**values))
        try:
            self._tx(work, passing=(sa.exc.IntegrityError,))
        except sa.exc.IntegrityError:  # another worker made it at the same moment
            self._tx(work)

    def begin_trial(self, run_id: str, *, point_idx: int, repetition: int,
                    position: int) -> int:
        """A trial row in status "running": per-second data can refer to it at once."""
        def work(conn: sa.Connection) -> int:
            result = conn.execute(trials.insert().values(
                run_id=run_id, point_idx=point_idx, repetition=repetition, position=position,
                status=TrialState.RUNNING, started_at=time.time(), finished_at=time.time(),
            ))
            key = result.inserted_primary_key
            if key is None:  # only without a compiled single-row insert; this one always is
                raise RuntimeError("the database returned no id for the new trial")
            return int(key[0])
        return self._tx(work)

    def add_second(self, trial_id: int, t: float, **values: float) -> None:
        self._tx(lambda conn: conn.execute(seconds.insert().values(trial_id=trial_id, t=t,
                                                                   **values)))

    def add_os_second(self, trial_id: int, t: float, figures: dict[str, float]) -> None:
        self._tx(lambda conn: conn.execute(os_seconds.insert().values(
            trial_id=trial_id, t=t, **{k: figures.get(k) for k in OS_FIELDS})))

    def finish_trial(self, trial_id: int, *, status: TrialState, value: float | None = None,
                     effective: dict[str, str] | None = None,
                     details: dict[str, Any] | None = None, error: str | None = None) -> None:
        self._tx(lambda conn: conn.execute(trials.update().where(trials.c.id == trial_id).values(
            status=status, finished_at=time.time(), value=value,
            effective=json.dumps(effective or {}), details=json.dumps(details or {}),
            error=storable(error),
        )))

    def discard_unfinished(self, run_id: str) -> int:
        """Trials left "running" by a process that died: not measurements, mark them so."""
        return self._tx(lambda conn: conn.execute(trials.update().where(
            (trials.c.run_id == run_id) & (trials.c.status == TrialState.RUNNING)
        ).values(status=TrialState.DISCARDED, error="knoblab stopped during this trial"))
        ).rowcount

    def set_status(self, run_id: str, status: RunStatus, error: str | None = None) -> None:
        finished = time.time() if status != RunStatus.RUNNING else None
        self._tx(lambda conn: conn.execute(runs.update().where(runs.c.id == run_id).values(
            status=status, finished_at=finished, error=storable(error))))

    def update_info(self, run_id: str, **items: Any) -> None:
        info = self.run(run_id)["info"]
        info.update(items)
        self._tx(lambda conn: conn.execute(runs.update().where(runs.c.id == run_id).values(
            info=json.dumps(info))))

    def save_original(self, run_id: str, server: dict[str, Any], name: str,
                      original: str | None) -> None:
        """Record a setting's original value before knoblab first changes it (once per run)."""
        def work(conn: sa.Connection) -> None:
            found = conn.execute(sa.select(saved_settings.c.name).where(
                (saved_settings.c.run_id == run_id) & (saved_settings.c.name == name))).first()
            if found is None:
                conn.execute(saved_settings.insert().values(
                    run_id=run_id, name=name, server=json.dumps(server, sort_keys=True),
                    original=original, status=SavedState.CHANGED, saved_at=time.time()))
            else:
                conn.execute(saved_settings.update().where(
                    (saved_settings.c.run_id == run_id) & (saved_settings.c.name == name)
                ).values(status=SavedState.CHANGED, restored_at=None))
        self._tx(work)

    def lock_run(self, run_id: str, gone: Callable[[dict[str, Any]], bool]) -> str:
        """Take the run for this process; a token to renew and release it with. A holder
        for which `gone(holder)` is true (a dead process, a silent machine) is replaced;
        any other makes this a UserError."""
        token = uuid.uuid4().hex

        def take(conn: sa.Connection) -> None:
            now = time.time()
            conn.execute(run_locks.insert().values(
                run_id=run_id, token=token, host=socket.gethostname(),
                pid=os.getpid(), acquired_at=now, heartbeat_at=now))

        def replace(conn: sa.Connection) -> bool:
            """Whether the claim is ours now (taken by a try whose answer was lost)."""
            holder = conn.execute(run_locks.select().where(
                run_locks.c.run_id == run_id)).mappings().first()
            if holder is None:
                return False  # released meanwhile
            if holder["token"] == token:
                return True
            if not gone(dict(holder)):
                raise RunBusy(f"run {run_id} is still being measured by process "
                              f"{holder['pid']} on {holder['host']}; wait for it, or "
                              "stop it (Ctrl-C) and resume then")
            # Only that holder's row: if another process replaced it first, it wins.
            conn.execute(run_locks.delete().where(
                (run_locks.c.run_id == run_id) & (run_locks.c.token == holder["token"])))
            return False

        for _ in range(3):
            try:
                self._tx(take, passing=(sa.exc.IntegrityError,))
                return token
            except sa.exc.IntegrityError:
                pass
            if self._tx(replace):
                return token
        raise UserError(f"run {run_id} is being taken over by another process; try again")

    def holders_on(self, host: str) -> list[int]:
        """Processes on `host` measuring a run of this store now (or left a claim behind)."""
        return self._tx(lambda conn: [int(pid) for pid in conn.execute(
            sa.select(run_locks.c.pid).where(run_locks.c.host == host)).scalars()],
            write=False)

    def renew_lock(self, run_id: str, token: str) -> None:
        self._tx(lambda conn: conn.execute(run_locks.update().where(
            (run_locks.c.run_id == run_id) & (run_locks.c.token == token)
        ).values(heartbeat_at=time.time())))

    def unlock_run(self, run_id: str, token: str) -> None:
        self._tx(lambda conn: conn.execute(run_locks.delete().where(
            (run_locks.c.run_id == run_id) & (run_locks.c.token == token))))

    def mark_restored(self, run_id: str, names: list[str],
                      status: SavedState = SavedState.RESTORED) -> None:
        """Settings no longer pending: put back ("restored"), never really changed ("unchanged":
        the server refused the change), or given up by the user ("forgotten")."""
        self._tx(lambda conn: conn.execute(saved_settings.update().where(
            (saved_settings.c.run_id == run_id) & saved_settings.c.name.in_(names)
        ).values(status=status, restored_at=time.time())))
