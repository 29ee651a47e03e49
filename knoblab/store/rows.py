"""What a stored row may hold, checked as it is read (a damaged or foreign row is one line,
never a traceback), and `RunInfo`, a run's own record of how it was made."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from typing import Any

from knoblab.codec import OMITTED_WHEN_NONE, Record
from knoblab.judging import Statistics
from knoblab.store.schema import SCHEMA_VERSION
from knoblab.vocabulary import RunStatus


@dataclass(frozen=True)
class RunInfo(Record):
    """What a run is (`runs.info`): written once by the runner, read back by resume and the
    results. Runs stored by older versions lack keys; their defaults are supplied here, once."""

    # first in the JSON; runs stored before it was kept are of the first version
    schema_version: int = field(default=SCHEMA_VERSION, metadata={"missing": 1})
    knobs: list[str] = field(default_factory=list)  # the columns of the report: swept names
    defaults: dict[str, str | None] = field(default_factory=dict)  # the baseline values
    base: dict[str, str] = field(default_factory=dict)  # [server.config], normalised
    dataset: dict[str, Any] = field(default_factory=dict)
    tied: dict[str, str] = field(default_factory=dict)
    workload: dict[str, Any] = field(default_factory=lambda: {"kind": "query"})
    steady: dict[str, Any] | None = None
    statistics: Statistics = Statistics()
    servers: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any] | None] | None = None  # per point, in a steps run
    one_at_a_time: bool = False
    unavailable: dict[str, str] = field(default_factory=dict)  # point index (text) -> why
    warnings: list[str] = field(default_factory=list)
    spec_dir: str | None = None
    owner: dict[str, Any] = field(default_factory=dict)  # pid and host measuring it
    # Adaptive repetitions: why the run stopped ("decided", "budget", "ceiling", "futile") after how
    # many rounds; None for fixed repetitions and runs still going.
    stopped: dict[str, Any] | None = None
    # How the points were measured: {"name": "blocked" | "restarts", "why": "..."}
    design: dict[str, str] | None = None
    # The machine measured on (knoblab.machine.describe); empty in runs made before it was kept.
    machine: dict[str, str] = field(default_factory=dict)
    knoblab_version: str = ""  # of the knoblab that measured it
    study: str | None = None  # the tuning study it was measured for (a trial, a validation)
    # Cores other programs kept busy on the average while it ran (a tune's validations)
    others_load: float | None = None
    # The answer in a few words as its report said it when the run ended, and when that was
    # ({"said": ..., "ended": finished_at}): `knoblab runs` lists it without judging the run
    # again, while the run ends when it said. Absent in runs that ended before it was kept.
    answer: dict[str, Any] | None = field(default=None, metadata=OMITTED_WHEN_NONE)

    @property
    def workload_kind(self) -> str:
        """The workload kind's name."""
        return str(self.workload.get("kind", "query"))


class Damaged(Exception):
    """What is wrong with a stored row (a damaged or hand-edited store), as a clause."""


def _text(value: Any, what: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise Damaged(f"its {what} is {_kind_of(value)}, not text")
    return value


def _number(value: Any, what: str, *, optional: bool = False, whole: bool = False) -> Any:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
        raise Damaged(f"its {what} is {_kind_of(value)}, not a "
                      f"{'whole number' if whole else 'number'}")
    if not math.isfinite(value):
        raise Damaged(f"its {what} is {value}, not a finite number")
    return value


def _kind_of(value: Any) -> str:
    if value is None:
        return "missing"
    if isinstance(value, bytes | memoryview):
        return "raw bytes"
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def _object(text: Any, what: str, *, empty: str = "{}") -> dict[str, Any]:
    """A stored JSON object (None: `empty`)."""
    if text is None:
        text = empty
    if not isinstance(text, str):
        raise Damaged(f"its {what} is {_kind_of(text)}, not JSON text")
    try:
        data = json.loads(text)
    except ValueError:
        raise Damaged(f"its {what} is not the JSON knoblab wrote") from None
    if not isinstance(data, dict):
        raise Damaged(f"its {what} is {_kind_of(data)}, not a JSON object")
    return data


def _names_to_text(data: dict[str, Any], what: str, *, optional: bool = False) -> None:
    for key, value in data.items():
        if not isinstance(key, str) or not (isinstance(value, str) or
                                            (optional and value is None)):
            raise Damaged(f"its {what} maps {_kind_of(key)} to {_kind_of(value)}")


RUN_STATES = frozenset(RunStatus) - {RunStatus.KILLED}  # killed is never stored


# RunInfo's fields by the JSON type each must have (None allowed where the field is optional).
_INFO_TYPES: dict[str, tuple[type, ...]] = {
    "knobs": (list,), "defaults": (dict,), "base": (dict,), "dataset": (dict,),
    "tied": (dict,), "workload": (dict,), "steady": (dict, type(None)),
    "statistics": (dict,), "servers": (list,), "steps": (list, type(None)),
    "one_at_a_time": (bool,), "unavailable": (dict,), "warnings": (list,),
    "spec_dir": (str, type(None)), "owner": (dict,), "stopped": (dict, type(None)),
    "design": (dict, type(None)), "machine": (dict,), "knoblab_version": (str,),
    "study": (str, type(None)), "schema_version": (int,),
}


def check_info(data: Any) -> None:
    """A run's description (`runs.info`) as knoblab writes it, or Damaged naming what is not:
    every field of the type RunInfo gives it, so that no reader meets a surprise."""
    if not isinstance(data, dict):
        raise Damaged(f"its description is {_kind_of(data)}, not a JSON object")
    for name, types in _INFO_TYPES.items():
        if name in data and not isinstance(data[name], types):
            raise Damaged(f"its description's {name} is {_kind_of(data[name])}")
    if not all(isinstance(k, str) for k in data.get("knobs", [])):
        raise Damaged("its description's knobs are not all names")
    if not all(isinstance(w, str) for w in data.get("warnings", [])):
        raise Damaged("its description's warnings are not all text")
    if not all(isinstance(s, dict) for s in data.get("servers", [])):
        raise Damaged("its description's servers are not all objects")
    if not all(s is None or isinstance(s, dict) for s in data.get("steps") or []):
        raise Damaged("its description's steps are not all objects")
    _names_to_text(data.get("defaults", {}), "description's defaults", optional=True)
    _names_to_text(data.get("base", {}), "description's base settings")
    _names_to_text(data.get("tied", {}), "description's tied settings")
    _names_to_text(data.get("unavailable", {}), "description's unavailable points")
    if not all(k.isdigit() for k in data.get("unavailable", {})):
        raise Damaged("its description's unavailable points are not point numbers")
    statistics = data.get("statistics", {})
    for f in fields(Statistics):
        if f.name in statistics:
            value = statistics[f.name]
            if isinstance(f.default, str):
                _text(value, f"statistics' {f.name}")
            else:
                _number(value, f"statistics' {f.name}", whole=isinstance(f.default, int))
    if not 0 < statistics.get("confidence", 0.5) < 1 or not 0 < statistics.get("alpha", 0.5) < 1 \
            or statistics.get("min_effect", 0) < 0:
        raise Damaged("its description's statistics are out of range (a confidence or alpha "
                      "not between 0 and 1, or a negative min_effect)")
    if statistics.get("test", "welch-log") not in ("welch-log", "welch", "mann-whitney"):
        raise Damaged(f"its description names a test knoblab does not know "
                      f"({_kind_of(statistics['test'])})")
    for step in data.get("steps") or []:
        if step is not None and not (isinstance(step.get("step"), int) and
                                     isinstance(step.get("role"), str) and
                                     isinstance(step.get("change"), dict) and
                                     isinstance(step.get("label"), str)):
            raise Damaged(f"its description's step {_kind_of(step)} is not a step")
    owner = data.get("owner", {})
    _number(owner.get("pid"), "owner's process id", optional=True, whole=True)
    _text(owner.get("host"), "owner's host", optional=True)


# A study's description (`studies.info`) by the JSON type of each field.
_STUDY_INFO_TYPES: dict[str, tuple[type, ...]] = {
    "owner": (dict,), "machine": (dict,), "knoblab_version": (str,), "trials": (int,),
    "total": (int,), "best": (str,), "server": (str,), "summary": (str,),
    "spent": (int, float),
}


def checked_study(row: Any) -> dict[str, Any]:
    """A `studies` row as a record, `info` read (an object), or Damaged naming what is not."""
    study = dict(row)
    for column in ("name", "status", "spec_source"):
        _text(study[column], column if column != "spec_source" else "spec")
    for column in ("host", "error"):
        _text(study[column], column, optional=True)
    _number(study["created_at"], "start time")
    _number(study["updated_at"], "time of its last change")
    _number(study["finished_at"], "end time", optional=True)
    info = study["info"] = _object(study["info"], "description")
    for name, types in _STUDY_INFO_TYPES.items():
        if name in info and (not isinstance(info[name], types) or isinstance(info[name], bool)
                             or (isinstance(info[name], float) and not math.isfinite(info[name]))):
            raise Damaged(f"its description's {name} is {_kind_of(info[name])}")
    owner = info.get("owner", {})
    _number(owner.get("pid"), "owner's process id", optional=True, whole=True)
    _text(owner.get("host"), "owner's host", optional=True)
    if study["result"] is not None:
        study["result"] = _object(study["result"], "result")
    return study


# A measurement's details (`trials.details`) by the shape of each field readers use: a number,
# text, an object of numbers or of texts, a list of numbers (None: also absent as null).
_DETAIL_NUMBERS = frozenset({
    "cached_before", "client_cpu_seconds", "copy_seconds", "cpu_seconds", "cpu_share",
    "errors", "iowait_share", "iterations_per_second", "latency_avg_ms", "latency_max_ms",
    "latency_p95_ms", "latency_p99_ms", "read_bytes", "reconnects", "rows", "start_seconds",
    "statements", "statements_per_iteration", "sysbench_tps", "threads", "transactions",
    "write_bytes"})


_DETAIL_SHAPES = {"regime": "text", "session": "texts", "filesystem": "texts",
                  "os": "numbers", "status": "numbers", "steady": "numbers", "runs": "list",
                  "per_connection_seconds": "list"}


def check_details(details: dict[str, Any], what: str) -> None:
    """A measurement's details as knoblab writes them, or Damaged naming the first field that
    is not (fields knoblab does not read are left as they are)."""
    for key, value in details.items():
        shape = "number" if key in _DETAIL_NUMBERS else _DETAIL_SHAPES.get(key)
        if shape is None or value is None:
            continue
        if shape == "number":
            _number(value, f"{what}'s detail {key}")
        elif shape == "text":
            _text(value, f"{what}'s detail {key}")
        elif shape == "list":
            if not isinstance(value, list):
                raise Damaged(f"its {what}'s detail {key} is {_kind_of(value)}, not a list")
            for item in value:
                _number(item, f"{what}'s detail {key}")
        else:
            if not isinstance(value, dict):
                raise Damaged(f"its {what}'s detail {key} is {_kind_of(value)}, not an object")
            for name, item in value.items():
                if shape == "texts":
                    _text(item, f"{what}'s detail {key}.{name}", optional=True)
                else:
                    _number(item, f"{what}'s detail {key}.{name}", optional=True)


def checked_run(row: Any) -> dict[str, Any]:
    """A `runs` row as a record: every column of the type knoblab writes, `info` read (an
    object), or Damaged naming the first column that is not."""
    run = dict(row)
    for column in ("id", "name", "kind", "status", "spec_source"):
        _text(run[column], column if column != "spec_source" else "spec")
    for column in ("host", "server_binary", "server_version", "error"):
        _text(run[column], column.replace("_", " "), optional=True)
    if run["status"] not in RUN_STATES:
        raise Damaged(f"its status is {_kind_of(run['status'])}, a state knoblab does not know")
    _number(run["created_at"], "start time")
    _number(run["finished_at"], "end time", optional=True)
    run["info"] = _object(run["info"], "description")
    check_info(run["info"])
    return run


def _listed(row: Any) -> dict[str, Any]:
    """A run as a listing shows it: `info` as stored (JSON text); a damaged run stands there
    as damaged, saying what is wrong, so that the others are still listed."""
    try:
        run = checked_run(row)
    except Damaged as exc:
        run = dict(row)
        keep = {c: run[c] if isinstance(run[c], str) else f"({_kind_of(run[c])})"
                for c in ("id", "name", "kind")}
        return {**run, **keep, "status": f"damaged: {exc}", "info": "{}",
                "created_at": _time_or_zero(run["created_at"]),
                "finished_at": None, "host": None, "server_version": None,
                "server_binary": None, "error": str(exc)}
    return {**run, "info": json.dumps(run["info"])}


def study_of(info: dict[str, Any]) -> str | None:
    """The tuning study a run was measured for (one of its trials, validations, reductions),
    from the run's description; None for a run of its own. The one place that says which
    runs are a study's: `knoblab runs` lists them only with --study, and `latest` is never
    one of them."""
    study = info.get("study")
    return study if isinstance(study, str) else None


def _listed_study(row: Any) -> dict[str, Any]:
    """A study as a listing shows it; a damaged one stands there as damaged, saying what is
    wrong, so that the others are still listed (`study` names it in one line)."""
    try:
        return checked_study(row)
    except Damaged as exc:
        study = dict(row)
        return {**study, "name": study["name"] if isinstance(study["name"], str) else
                f"({_kind_of(study['name'])})", "status": f"damaged: {exc}", "info": {},
                "result": None, "host": None, "finished_at": None, "error": str(exc),
                "spec_source": "", "created_at": _time_or_zero(study["created_at"]),
                "updated_at": _time_or_zero(study["updated_at"])}


def _time_or_zero(when: Any) -> float:
    """A stored time, or 0 (the epoch) for one that is not a finite number."""
    return float(when) if isinstance(when, int | float) and not isinstance(when, bool) and \
        math.isfinite(when) else 0.0
