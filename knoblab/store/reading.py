"""The store's read side: a run, its points, its trials and seconds, runs and studies
listed; everything reports are built from."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from knoblab.errors import UserError
from knoblab.store.base import Connected
from knoblab.store.rows import (
    Damaged,
    _kind_of,
    _listed,
    _listed_study,
    _names_to_text,
    _number,
    _object,
    _text,
    check_details,
    checked_run,
    checked_study,
    study_of,
)
from knoblab.store.schema import (
    MAX_ROWS,
    OS_FIELDS,
    SECOND_FIELDS,
    Trial,
    os_seconds,
    points,
    runs,
    saved_settings,
    seconds,
    studies,
    study_key,
    trials,
)
from knoblab.vocabulary import Experiment, SavedState, TrialState


class Reads(Connected):
    """What the store reads back, each row checked as it is read."""

    def studies(self, name: str | None = None) -> list[dict[str, Any]]:
        """The tuning studies, newest first (`name`: only those whose name contains it); none
        in a store no study was written to."""
        def read(conn: sa.Connection) -> list[Any]:
            if not sa.inspect(conn).has_table(studies.name):
                return []
            query = studies.select().order_by(studies.c.created_at.desc())
            if name:
                query = query.where(studies.c.name.contains(name, autoescape=True))
            return list(conn.execute(query).mappings().all())
        return [_listed_study(row) for row in self._tx(read, write=False)]

    def study(self, name: str) -> dict[str, Any] | None:
        """The study of exactly this name, with its result (None: not yet made), or None."""
        key = study_key(name)

        def read(conn: sa.Connection) -> Any:
            if not sa.inspect(conn).has_table(studies.name):
                return None
            return conn.execute(studies.select().where(studies.c.id == key)).mappings().first()
        row = self._tx(read, write=False)
        if row is None:
            return None
        with self._reading(f"study {name!r}"):
            return checked_study(row)

    def pending_restores(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Settings still changed: by a run that was killed, or whose restore failed."""
        query = saved_settings.select().where(saved_settings.c.status == SavedState.CHANGED)
        if run_id is not None:
            query = query.where(saved_settings.c.run_id == run_id)
        rows = self._tx(lambda conn: conn.execute(query.order_by(saved_settings.c.saved_at))
                        .mappings().all(), write=False)
        return [{**dict(r), "server": self._json(r["server"], f"run {r['run_id']}'s server")}
                for r in rows]

    def run(self, run_id: str) -> dict[str, Any]:
        """A run by its id, a unique beginning of it, or "latest" (the newest run of its own,
        never a tuning study's trial, validation or reduction)."""
        if run_id == "latest":
            newest = self.newest_run()
            if newest is None:
                raise UserError("the store holds no run of its own yet" + (
                    " (only tuning studies': see knoblab runs)" if self.list_runs(limit=1)
                    else "") + "; start one with: knoblab run SPEC")
            run_id = newest["id"]

        def find(conn: sa.Connection) -> tuple[Any, list[str]]:
            row = conn.execute(runs.select().where(runs.c.id == run_id)).mappings().first()
            if row is not None:
                return row, []
            return None, list(conn.execute(sa.select(runs.c.id).where(
                runs.c.id.startswith(run_id, autoescape=True))).scalars().all())

        row, matches = self._tx(find, write=False)
        if row is None:
            if len(matches) == 1:
                return self.run(matches[0])
            if matches:
                shown = ", ".join(sorted(matches)[:5]) + (", …" if len(matches) > 5 else "")
                raise UserError(f"run {run_id!r} is ambiguous: it begins {len(matches)} "
                                f"runs ({shown}); give more of the id")
            raise UserError(f"no run {run_id!r} in the store; list runs with: knoblab runs")
        with self._reading(f"run {row['id']}"):
            return checked_run(row)

    def points(self, run_id: str) -> list[tuple[dict[str, str], dict[str, str]]]:
        rows = self._tx(lambda conn: conn.execute(points.select().where(
            points.c.run_id == run_id).order_by(points.c.idx)).mappings().all(), write=False)
        found = []
        with self._reading(f"run {run_id}"):
            for i, r in enumerate(rows):
                if r["idx"] != i:
                    raise Damaged(f"its points are numbered {_kind_of(r['idx'])} where "
                                  f"{i} belongs")
                requested = _object(r["requested"], f"point {i}'s settings", empty="")
                config = _object(r["config"], f"point {i}'s configuration", empty="")
                _names_to_text(requested, f"point {i}'s settings")
                _names_to_text(config, f"point {i}'s configuration")
                found.append((requested, config))
        return found

    def trials(self, run_id: str) -> list[Trial]:
        rows = self._tx(lambda conn: conn.execute(trials.select().where(
            trials.c.run_id == run_id).order_by(trials.c.position, trials.c.id))
            .mappings().all(), write=False)
        with self._reading(f"run {run_id}"):
            return [self._trial(r) for r in rows]

    def _trial(self, r: Any) -> Trial:
        """A `trials` row as a record, or Damaged naming what is wrong in it: a measured value
        is a finite number, never negative (a time or a throughput)."""
        what = f"trial {r['id']}"
        for column in ("point_idx", "repetition", "position"):
            if _number(r[column], f"{what}'s {column.replace('_', ' ')}", whole=True) < 0:
                raise Damaged(f"its {what}'s {column.replace('_', ' ')} is negative")
        try:
            status = TrialState(r["status"])
        except ValueError:
            raise Damaged(f"its {what} is in a state knoblab does not know "
                          f"({_kind_of(r['status'])}): a newer knoblab wrote it, or the store "
                          "is damaged") from None
        value = _number(r["value"], f"{what}'s measured value", optional=True)
        if value is not None and value < 0:
            raise Damaged(f"its {what}'s measured value is negative ({value})")
        started = _number(r["started_at"], f"{what}'s start time")
        finished = _number(r["finished_at"], f"{what}'s end time")
        effective = _object(r["effective"], f"{what}'s settings read back")
        _names_to_text(effective, f"{what}'s settings read back", optional=True)
        details = _object(r["details"], f"{what}'s details")
        check_details(details, what)
        return Trial(r["id"], r["point_idx"], r["repetition"], r["position"], status, value,
                     effective, details,
                     _text(r["error"], f"{what}'s error", optional=True),
                     max(0.0, finished - started), started)

    def seconds(self, run_id: str) -> dict[int, list[dict[str, float]]]:
        """Per-second workload reports of a run's trials, by trial id, in time order."""
        return self._per_second(seconds, SECOND_FIELDS, run_id)

    def os_seconds(self, run_id: str) -> dict[int, list[dict[str, float]]]:
        """The OS figures of every second, by trial id, in time order."""
        return self._per_second(os_seconds, OS_FIELDS, run_id)

    def _per_second(self, table: sa.Table, fields: tuple[str, ...],
                    run_id: str) -> dict[int, list[dict[str, float]]]:
        query = (sa.select(table).join(trials, trials.c.id == table.c.trial_id)
                 .where(trials.c.run_id == run_id).order_by(table.c.trial_id, table.c.t))
        by_trial: dict[int, list[dict[str, float]]] = {}
        with self._reading(f"run {run_id}"):
            for row in self._tx(lambda conn: conn.execute(query).mappings().all(), write=False):
                what = f"trial {row['trial_id']}'s {table.name.replace('_', ' ')}"
                _number(row["t"], f"{what} time")
                for k in fields:
                    _number(row[k], f"{what} {k}", optional=True)
                by_trial.setdefault(row["trial_id"], []).append(
                    {k: row[k] for k in ("t", *fields)})
        return by_trial

    def list_runs(self, limit: int | None = 20, name: str | None = None,
                  offset: int = 0) -> list[dict[str, Any]]:
        """The newest runs first; `name`: only runs whose name contains it; `offset`: after
        skipping that many. A limit beyond what the database can count (or None) is all of
        them."""
        query = runs.select().order_by(runs.c.created_at.desc(), runs.c.id)
        if name:
            query = query.where(runs.c.name.contains(name, autoescape=True))
        if limit is not None and limit < MAX_ROWS:
            query = query.limit(max(limit, 0))
        if offset > 0:
            query = query.offset(offset)
        rows = self._tx(lambda conn: conn.execute(query).mappings().all(), write=False)
        return [_listed(r) for r in rows]

    def each_run(self, name: str | None = None, page: int = 500) -> Iterator[dict[str, Any]]:
        """The runs as `list_runs` gives them, newest first, read a page at a time: a reader
        that stops after a few does not read a store of thousands (most of them studies')."""
        offset = 0
        while True:
            found = self.list_runs(limit=page, name=name, offset=offset)
            yield from found
            if len(found) < page:
                return
            offset += page

    def newest_run(self) -> dict[str, Any] | None:
        """The newest run of its own (as `list_runs` gives it), not a tuning study's, nor a
        capture's or a verify's (whose answers are not points)."""
        return next((run for run in self.each_run()
                     if study_of(json.loads(run["info"])) is None
                     and Experiment(run["kind"]).has_points), None)
