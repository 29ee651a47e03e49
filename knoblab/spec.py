"""The experiment spec: a TOML file, read strictly and validated against the server's catalog.

Parsing (`load_spec`) checks shape and types and needs no server; `Spec.points(catalog)` checks
every setting against the knobs the server really has, before anything runs.
"""

from __future__ import annotations

import difflib
import itertools
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from knoblab.catalog import Catalog
from knoblab.errors import UserError
from knoblab.server.external import Endpoint
from knoblab.units import parse_size
from knoblab.workloads.dataset import ENGINES, SLACK_TYPES, ScanTable
from knoblab.workloads.query import CACHE_MODES, QueryWorkload
from knoblab.workloads.script import ScriptWorkload
from knoblab.workloads.sysbench import SysbenchWorkload

TOP_KEYS = {"name", "description", "server", "dataset", "workload", "sweep", "step", "steps", "tie",
            "statistics"}
SECTION_KEYS = {
    "server": {"kind", "binary", "config", "allow_durability_tradeoff", "memory_budget",
               "host", "port", "socket", "user", "password", "password_env", "option_file",
               "restart_command", "config_include"},
    "dataset": {"kind", "rows", "size", "engine", "slack_type", "index"},
    "statistics": {"min_effect", "alpha", "confidence", "test", "seed"},
    "steps": {"one_at_a_time"},
}
WORKLOAD_KEYS = {
    "query": {"kind", "sql", "cache", "repetitions", "timed_runs", "timeout"},
    "sysbench": {"kind", "test", "threads", "tables", "table_size", "rand_type", "duration",
                 "rate", "percentile", "warmup", "window", "stall_fraction", "repetitions",
                 "timeout", "options"},
    "script": {"kind", "setup", "body", "setup_file", "body_file", "connections", "iterations",
               "transaction", "repetitions", "timeout"},
}
# Sweepable beside the server's settings: the workload's concurrency, and the query workload's
# dataset (each variant of the dataset is built once into a template of its own).
SWEEPABLE = {"sysbench": {"threads"}, "query": {"rows", "engine", "slack_type"}, "script": set()}
TESTS = ("welch-log", "welch", "mann-whitney")


@dataclass(frozen=True)
class Steady:
    """How a time series' steady state is found: warm-up dropped, then (optionally) the last N s."""

    warmup: int | None = None  # seconds; None = detected (MSER-5)
    window: int | None = None  # the last N seconds; None = everything after the warm-up
    stall_fraction: float = 0.10  # a second below this fraction of the steady median is a stall


@dataclass(frozen=True)
class Statistics:
    min_effect: float = 0.03
    alpha: float = 0.05
    confidence: float = 0.95
    test: str = "welch-log"
    seed: int = 1


@dataclass(frozen=True)
class Point:
    """One configuration: the swept settings as requested and as the server's config takes them.

    In a steps experiment `requested` and `config` hold the cumulative settings, and `step`
    says which step (0 = the base), whether it is cumulative or one change "alone", and what
    the step adds.
    """

    requested: dict[str, str]
    config: dict[str, str]
    step: dict[str, Any] | None = None


@dataclass
class Spec:
    name: str
    description: str
    binary: str | None
    base_config: dict[str, Any]
    dataset: ScanTable | None  # None for sysbench and scripts, which make their own tables
    workload: QueryWorkload | SysbenchWorkload | ScriptWorkload
    repetitions: int
    sweep: dict[str, list[Any]]
    statistics: Statistics
    steps: list[dict[str, Any]] = field(default_factory=list)  # [[step]] tables, in order
    one_at_a_time: bool = False  # also measure each step's change alone, from the base
    servers: dict[str, str] = field(default_factory=dict)  # label -> binary, when 2+ compared
    base_dir: Path | None = None  # where the files the spec names are (script files)
    external: Endpoint | None = None  # a running server to tune, instead of sandboxes
    steady: Steady | None = None  # time-series workloads only
    tied: dict[str, str] = field(default_factory=dict)  # follower knob -> leader knob
    allow_durability_tradeoff: bool = False
    memory_budget: int | None = None  # bytes; None = 80% of the machine's memory
    source: str = field(default="", repr=False)

    def dataset_for(self, requested: dict[str, str]) -> ScanTable | None:
        """The dataset variant a point runs on (its swept rows, engine or slack_type)."""
        if self.dataset is None:
            return None
        changes: dict[str, Any] = {}
        if "rows" in requested:
            changes.update(rows=int(requested["rows"]), size_bytes=None)
        if "engine" in requested:
            changes["engine"] = requested["engine"]
        if "slack_type" in requested:
            changes["slack_type"] = requested["slack_type"]
        return replace(self.dataset, **changes) if changes else self.dataset

    @property
    def kind(self) -> str:
        if isinstance(self.workload, SysbenchWorkload):
            return "sysbench"
        return "script" if isinstance(self.workload, ScriptWorkload) else "query"

    @property
    def experiment(self) -> str:
        return "steps" if self.steps else "sweep"

    def setting_names(self) -> list[str]:
        """Every server setting the spec names (base, sweep, steps), as written."""
        names = [*self.base_config, *(n for n in self.sweep if n not in SWEEPABLE[self.kind])]
        names += [n for step in self.steps for n in step]
        return list(dict.fromkeys(names))

    def base_settings(self, catalog: Catalog, lacking: frozenset[str] = frozenset()
                      ) -> dict[str, str]:
        base = {}
        for name, raw in self.base_config.items():
            if name not in lacking:
                knob = catalog.knob(name)
                base[knob.name] = knob.normalize(raw)
        return base

    def points(self, catalog: Catalog, lacking: frozenset[str] = frozenset()
               ) -> tuple[dict[str, str], list[Point], list[str]]:
        """Validated base settings, the points and warnings; UserError on anything wrong.

        Settings named in `lacking` (ones this server does not have, when several servers are
        compared) are left out of the base and the steps.
        """
        base = self.base_settings(catalog, lacking)
        if self.steps:
            return (base, *self._step_points(catalog, base, lacking))
        axes = []
        for name, values in self.sweep.items():
            if name in SWEEPABLE[self.kind]:
                axes.append(_parameter_axis(name, values))
                continue
            knob = catalog.knob(name)
            if knob.name in base:
                raise UserError(f"{knob.name} is both in [server.config] and [sweep]; keep one")
            seen: dict[str, Any] = {}
            axis = []
            for raw in values:
                value = knob.normalize(raw)
                if value in seen:
                    raise UserError(f"[sweep] {knob.name}: {raw!r} and {seen[value]!r} are the "
                                    "same value; list each value once")
                seen[value] = raw
                axis.append((knob.name, _as_text(raw), value))
            axes.append(axis)
        points = []
        for combo in itertools.product(*axes):
            config = {n: v for n, _, v in combo if n not in SWEEPABLE[self.kind]}
            points.append(Point({n: r for n, r, _ in combo}, config))
        for follower, leader in self.tied.items():
            self._tie(catalog, follower, leader, base, points)
        return base, points, []

    def _step_points(self, catalog: Catalog, base: dict[str, str], lacking: frozenset[str]
                     ) -> tuple[list[Point], list[str]]:
        """Step 0 is the base; step i adds its settings to step i-1's; with one_at_a_time each
        change from the second step on is also measured alone, from the base.

        A step that changes nothing here (its values are already in force, or this server
        lacks its settings) keeps its place, marked `skip`, so every server compared has the
        same steps; it is not measured.
        """
        warnings: list[str] = []
        requested: dict[str, str] = {}
        config: dict[str, str] = {}

        def in_force(name: str) -> str | None:
            if name in config:
                return config[name]
            if name in base:
                return base[name]
            return catalog.knobs[name].default_value()

        cumulative = [Point({}, {}, {"step": 0, "role": "cumulative", "change": {},
                                     "label": "base" if self.base_config else "defaults"})]
        alone: list[Point] = []
        for number, step in enumerate(self.steps, start=1):
            change_req, change_config, unchanged = {}, {}, []
            missing = [name for name in step if name in lacking]
            for name, raw in step.items():
                if name in lacking:
                    continue
                knob = catalog.knob(name)
                value = knob.normalize(raw)
                if value == in_force(knob.name):
                    unchanged.append(f"{knob.name} is already {_as_text(raw)}")
                    continue
                change_req[knob.name], change_config[knob.name] = _as_text(raw), value
            skip = None
            if unchanged:
                skip = "changes nothing" if not change_req else None
                what, left = ("changes nothing", "it was") if skip else \
                    ("partly changes nothing", "that part was")
                warnings.append(f"step {number} {what}: {'; '.join(unchanged)} at that point; "
                                f"{left} left out")
            if missing and not change_req:
                skip = f"not on this server: {', '.join(missing)}"
            requested.update(change_req)
            config.update(change_config)
            shown = change_req or {name: _as_text(raw) for name, raw in step.items()}
            meta = {"step": number, "role": "cumulative", "change": change_req,
                    "label": "+ " + ", ".join(f"{k}={v}" for k, v in shown.items()),
                    "lacking": missing, "skip": skip}
            cumulative.append(Point(dict(requested), dict(config), meta))
            if self.one_at_a_time and number > 1:
                alone.append(Point(dict(change_req), dict(change_config),
                                   {**meta, "role": "alone"}))
        for follower, leader in self.tied.items():
            self._tie(catalog, follower, leader, base, [*cumulative, *alone])
        return cumulative + alone, warnings

    def _tie(self, catalog: Catalog, follower: str, leader: str, base: dict[str, str],
             points: list[Point]) -> None:
        """Give `follower` the leader's value everywhere (tmp_table_size needs its twin)."""
        follower_knob, leader_knob = catalog.knob(follower), catalog.knob(leader)
        if follower_knob.name in base or any(follower_knob.name in p.config for p in points):
            raise UserError(f"[tie] {follower_knob.name} follows {leader_knob.name}: remove it "
                            "from [server.config], [sweep] and the steps")
        if leader_knob.name in base:
            base[follower_knob.name] = follower_knob.normalize(base[leader_knob.name])
            return
        if not any(leader_knob.name in point.config for point in points):
            raise UserError(f"[tie] {follower_knob.name} = {leader!r}: the leader must be swept, "
                            "set in a step or in [server.config]")
        for point in points:
            if leader_knob.name in point.config:
                point.config[follower_knob.name] = follower_knob.normalize(
                    point.config[leader_knob.name])


def load_spec(path: Path) -> Spec:
    try:
        source = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read spec {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a UTF-8 text file; save the spec as UTF-8 TOML") from None
    try:
        data = tomllib.loads(source)
    except ValueError as exc:  # TOMLDecodeError, and ValueError for absurd integers
        raise UserError(f"{path}: invalid TOML: {exc}") from None
    return parse_spec(data, source, default_name=path.stem, base_dir=path.parent.resolve())


def parse_spec(data: dict[str, Any], source: str = "", default_name: str = "experiment",
               base_dir: Path | None = None) -> Spec:
    """The spec from parsed TOML; `base_dir` is where files the spec names are looked for."""
    _check_keys("the spec", data, TOP_KEYS)
    server = _section(data, "server")
    dataset = _section(data, "dataset")
    workload = _section(data, "workload")
    statistics = _section(data, "statistics")
    kind = workload.get("kind", "query")
    if not isinstance(kind, str) or kind not in WORKLOAD_KEYS:
        raise UserError(f"[workload] kind = {kind!r}: use \"query\", \"sysbench\" or "
                        "\"script\"")
    _check_keys("[workload]", workload, WORKLOAD_KEYS[kind])
    steps = _steps(data)
    sweep = data.get("sweep")
    if steps and sweep is not None:
        raise UserError("a spec has either [sweep] or [[step]] tables, not both; run the two "
                        "studies as two specs")
    if steps:
        sweep = {}
    elif not isinstance(sweep, dict) or not sweep:
        raise UserError("[sweep]: give at least one setting with a list of values, "
                        "e.g. read_buffer_size = [\"64K\", \"128K\"]; or apply settings "
                        "one by one with [[step]] tables")
    for name, values in sweep.items():
        if not isinstance(values, list) or len(values) < 2:
            raise UserError(f"[sweep] {name}: give a list of at least two values to compare")
        for value in values:
            if not isinstance(value, str | int | float | bool):
                raise UserError(f"[sweep] {name}: {value!r} is not a single value")

    external = _external(server)
    binary, servers = _binaries(server.get("binary"))
    config = server.get("config", {})
    if not isinstance(config, dict):
        raise UserError("[server.config] must be a table of setting = value")

    repetitions = _number(workload, "repetitions", "workload", 1 if kind == "sysbench" else 5,
                          int, 1, 10_000)
    steady = None
    if kind == "script":
        if dataset:
            raise UserError("[dataset]: a script makes its own tables in its setup; remove "
                            "[dataset]")
        table = None
        work = _script_workload(workload, base_dir)
    elif kind == "query":
        if "rows" in sweep:
            if "rows" in dataset or "size" in dataset:
                raise UserError("[sweep] rows: the dataset size is swept; remove rows and size "
                                "from [dataset]")
            first = sweep["rows"][0]
            dataset = {**dataset, "rows": first if isinstance(first, int) else 1}
        table = _scan_table(dataset)
        work: QueryWorkload | SysbenchWorkload = _query_workload(workload)
    else:
        if dataset:
            raise UserError("[dataset]: sysbench prepares its own tables; set tables and "
                            "table_size in [workload] and remove [dataset]")
        table = None
        work, steady = _sysbench_workload(workload)
    for name in sweep:
        if name in {"sql", "cache", "tables", "table_size", "duration", "rand_type", "size"}:
            extra = ", ".join(sorted(SWEEPABLE[kind]))
            raise UserError(f"[sweep] {name}: only server settings and {extra} can be swept")
    tied = data.get("tie", {})
    if not isinstance(tied, dict) or not all(isinstance(v, str) for v in tied.values()):
        raise UserError("[tie] must be a table of follower = \"leader\", e.g. "
                        "max_heap_table_size = \"tmp_table_size\"")

    stats = Statistics(
        min_effect=_number(statistics, "min_effect", "statistics", 0.03, float, 0.0, 10.0),
        alpha=_number(statistics, "alpha", "statistics", 0.05, float, 1e-9, 0.5),
        confidence=_number(statistics, "confidence", "statistics", 0.95, float, 0.5, 0.9999),
        # Times: effects multiply (log scale). Throughput batch means: plain Welch.
        test=_text(statistics, "test", "statistics",
                   "welch" if kind == "sysbench" else "welch-log"),
        seed=_number(statistics, "seed", "statistics", 1, int, 0, 2**63 - 1),
    )
    if stats.test not in TESTS:
        raise UserError(f"[statistics] test = {stats.test!r}: use one of {', '.join(TESTS)}")

    return Spec(
        name=str(data.get("name", default_name)),
        description=str(data.get("description", "")),
        binary=binary,
        base_config=config,
        dataset=table,
        workload=work,
        repetitions=repetitions,
        sweep=sweep,
        statistics=stats,
        steady=steady,
        tied=dict(tied),
        steps=steps,
        one_at_a_time=_flag(_section(data, "steps"), "one_at_a_time", "steps"),
        servers=servers,
        base_dir=base_dir,
        external=external,
        allow_durability_tradeoff=_flag(server, "allow_durability_tradeoff", "server"),
        memory_budget=parse_size(server["memory_budget"], "[server] memory_budget")
        if "memory_budget" in server else None,
        source=source,
    )


def _steps(data: dict[str, Any]) -> list[dict[str, Any]]:
    steps = data.get("step", [])
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        raise UserError("[[step]]: each step is a table of settings, e.g.\n[[step]]\n"
                        "innodb_flush_log_at_trx_commit = 0")
    if "steps" in data and not steps:
        raise UserError("[steps] is set but there is no [[step]]; add one [[step]] table per "
                        "change to apply")
    for number, step in enumerate(steps, start=1):
        if not step:
            raise UserError(f"step {number} is empty; give it at least one setting = value")
        for name, value in step.items():
            if isinstance(value, dict | list) or name in {"threads", "rows", "binary"}:
                raise UserError(f"step {number}: {name} = {value!r}: a step sets server "
                                "settings to single values")
    return steps


SANDBOX_ONLY = ("binary",)
EXTERNAL_ONLY = ("host", "port", "socket", "user", "password_env", "option_file",
                 "restart_command", "config_include")


def _external(server: dict[str, Any]) -> Endpoint | None:
    if "password" in server:
        raise UserError("[server] password: a password is never written in a spec; name the "
                        "environment variable holding it (password_env = \"MYSQL_PWD\") or an "
                        "option file (option_file = \"~/.my.cnf\")")
    kind = server.get("kind", "sandbox")
    if kind not in ("sandbox", "external"):
        raise UserError(f"[server] kind = {kind!r}: use \"sandbox\" (a server knoblab starts) or "
                        "\"external\" (a running server)")
    if kind == "sandbox":
        for key in EXTERNAL_ONLY:
            if key in server:
                raise UserError(f"[server] {key}: only for kind = \"external\"; a sandbox is "
                                "reached on its own private socket")
        return None
    for key in SANDBOX_ONLY:
        if key in server:
            raise UserError(f"[server] {key}: not for kind = \"external\" (the running server "
                            "is whatever binary it is); remove it")
    if "host" in server and "socket" in server:
        raise UserError("[server] give host (and port) or socket, not both")
    command = server.get("restart_command")
    if command is not None and (not isinstance(command, list) or not command or
                                not all(isinstance(a, str) and a for a in command)):
        raise UserError(f"[server] restart_command = {command!r}: give the command as a list "
                        "of words, run without a shell, e.g. [\"systemctl\", \"restart\", "
                        "\"mariadb\"]")
    include = _text(server, "config_include", "server", "") or None
    if (command is None) != (include is None):
        raise UserError("[server] restart_command and config_include go together: knoblab "
                        "writes restart-only settings to config_include, then restarts")
    endpoint = Endpoint(
        host=_text(server, "host", "server", "127.0.0.1") if "socket" not in server else None,
        port=_number(server, "port", "server", 3306, int, 1, 65535),
        socket=_text(server, "socket", "server", "") or None,
        user=_text(server, "user", "server", "root"),
        password_env=_text(server, "password_env", "server", "") or None,
        option_file=_text(server, "option_file", "server", "") or None,
        restart_command=tuple(command) if command else None,
        config_include=include,
    )
    if endpoint.option_file and not _path(endpoint.option_file, "option_file").is_file():
        raise UserError(f"[server] option_file = {endpoint.option_file!r}: no such file")
    return endpoint


def _path(text: str, key: str) -> Path:
    try:
        return Path(text).expanduser()
    except RuntimeError:  # ~user of a user this machine does not have
        raise UserError(f"[server] {key} = {text!r}: no such user's home directory") from None


def _binaries(raw: Any) -> tuple[str | None, dict[str, str]]:
    """One binary, or several compared: a list of names/paths or a table of label = path."""
    example = ("e.g. binary = \"/usr/sbin/mariadbd\", or to compare servers "
               "binary = {gcc = \"/usr/sbin/mariadbd\", icc = \"/opt/icc/sbin/mariadbd\"}")
    if raw is None:
        return None, {}
    if isinstance(raw, str) and raw.strip():
        return raw, {}
    if isinstance(raw, list):
        if len(set(map(str, raw))) < len(raw):
            raise UserError("[server] binary: a binary is listed twice; list each server once")
        raw = {str(item): item for item in raw}
    if not isinstance(raw, dict) or not all(isinstance(v, str) and v.strip()
                                            for v in raw.values()):
        raise UserError(f"[server] binary = {raw!r}: give a name on PATH or a path, {example}")
    if len(raw) < 2:
        raise UserError(f"[server] binary: to compare servers give two or more different "
                        f"binaries, {example}")
    if len(set(raw.values())) < len(raw):
        raise UserError("[server] binary: a binary is listed twice; list each server once")
    return None, dict(raw)


def _script_workload(workload: dict[str, Any], base_dir: Path | None) -> ScriptWorkload:
    texts = {}
    for part in ("setup", "body"):
        if part in workload and f"{part}_file" in workload:
            raise UserError(f"[workload] give {part} or {part}_file, not both")
        if f"{part}_file" in workload:
            name = _text(workload, f"{part}_file", "workload", "")
            path = (base_dir or Path.cwd()) / name
            try:
                texts[part] = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                reason = getattr(exc, "strerror", None) or (
                    "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else "not a file name")
                raise UserError(f"[workload] {part}_file = {name!r}: cannot read {path}: "
                                f"{reason}") from None
        else:
            texts[part] = _text(workload, part, "workload", "")
    return ScriptWorkload(
        setup=texts["setup"], body=texts["body"],
        connections=_number(workload, "connections", "workload", 1, int, 1, 10_000),
        iterations=_number(workload, "iterations", "workload", 1000, int, 1, 10**9),
        transaction=_number(workload, "transaction", "workload", 1, int, 1, 10**9),
        timeout=_number(workload, "timeout", "workload", 3600.0, float, 0.001, 7 * 86400.0),
    )


def _scan_table(dataset: dict[str, Any]) -> ScanTable:
    if dataset.get("kind", "scan-table") != "scan-table":
        raise UserError(f"[dataset] kind = {dataset['kind']!r}: the built-in dataset is "
                        "\"scan-table\"")
    rows = dataset.get("rows")
    if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int)):
        raise UserError(f"[dataset] rows = {rows!r}: must be a whole number, e.g. 2_000_000")
    size = parse_size(dataset["size"], "[dataset] size") if "size" in dataset else None
    return ScanTable(rows=rows, size_bytes=size,
                     engine=_text(dataset, "engine", "dataset", "MyISAM"),
                     slack_type=_text(dataset, "slack_type", "dataset", "VARCHAR(50)"),
                     index=_flag(dataset, "index", "dataset"))


def _query_workload(workload: dict[str, Any]) -> QueryWorkload:
    sql = _text(workload, "sql", "workload", "")
    if not sql.strip():
        raise UserError("[workload] sql: give the statement to time, e.g. "
                        "sql = \"SELECT COUNT(*) FROM dt2 WHERE slack LIKE 'a%'\"")
    cache = _text(workload, "cache", "workload", "warm")
    if cache not in CACHE_MODES:
        raise UserError(f"[workload] cache = {cache!r}: use \"warm\" or \"cold\"")
    return QueryWorkload(
        sql=sql, cache=cache,
        timeout=_number(workload, "timeout", "workload", 3600.0, float, 0.001, 7 * 86400.0),
        timed_runs=_number(workload, "timed_runs", "workload", 1, int, 1, 1000),
    )


def _sysbench_workload(workload: dict[str, Any]) -> tuple[SysbenchWorkload, Steady]:
    def integer(key: str, default: int, low: int, high: int) -> int:
        return _number(workload, key, "workload", default, int, low, high)

    options = workload.get("options", {})
    if not isinstance(options, dict) or any(
            not isinstance(v, str | int | float | bool) for v in options.values()):
        raise UserError("[workload.options] must be a table of sysbench option = value, "
                        "e.g. db_ps_mode = \"disable\"")
    warmup = workload.get("warmup", "auto")
    if warmup != "auto":
        warmup = integer("warmup", 0, 0, 10**7)
    window = integer("window", 0, 0, 10**7)
    duration = integer("duration", 60, 1, 10**7)
    sysbench = SysbenchWorkload(
        test=_text(workload, "test", "workload", "oltp_read_write"),
        threads=integer("threads", 8, 1, 100_000),
        tables=integer("tables", 4, 1, 100_000),
        table_size=integer("table_size", 100_000, 1, 10**10),
        rand_type=_text(workload, "rand_type", "workload", "uniform"),
        duration=duration,
        rate=integer("rate", 0, 0, 10**9),
        percentile=integer("percentile", 99, 1, 100),
        options=tuple(sorted((str(k), _as_text(v)) for k, v in options.items())),
    )
    steady = Steady(
        warmup=None if warmup == "auto" else warmup,
        window=window or None,
        stall_fraction=_number(workload, "stall_fraction", "workload", 0.10, float, 0.0, 1.0),
    )
    if steady.warmup is not None and steady.warmup >= duration:
        raise UserError(f"[workload] warmup = {steady.warmup}: must be shorter than the "
                        f"duration ({duration} s)")
    return sysbench, steady


def _parameter_axis(name: str, values: list[Any]) -> list[tuple[str, str, str]]:
    """An axis of a sweepable parameter that is not a server setting."""
    choices = {"engine": ENGINES, "slack_type": SLACK_TYPES}.get(name)
    axis = []
    for raw in values:
        if choices is None:
            if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
                raise UserError(f"[sweep] {name} = {raw!r}: must be whole numbers of at least 1")
            value = str(raw)
        else:
            match = [c for c in choices if isinstance(raw, str) and c.lower() == raw.lower()]
            if not match:
                raise UserError(f"[sweep] {name} = {raw!r}: use one of {', '.join(choices)}")
            value = match[0]
        if any(existing == value for _, _, existing in axis):
            raise UserError(f"[sweep] {name}: {raw} is listed twice; list each value once")
        axis.append((name, value, value))
    return axis


def _section(data: dict[str, Any], name: str) -> dict[str, Any]:
    section = data.get(name, {})
    if not isinstance(section, dict):
        raise UserError(f"[{name}] must be a table (a [{name}] section), not a single value")
    if name in SECTION_KEYS:  # [workload]'s keys depend on its kind: checked there
        _check_keys(f"[{name}]", section, SECTION_KEYS[name])
    return section


def _check_keys(where: str, data: dict[str, Any], allowed: set[str]) -> None:
    for key in data:
        if key not in allowed:
            close = difflib.get_close_matches(key, sorted(allowed), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else \
                f"; allowed: {', '.join(sorted(allowed))}"
            raise UserError(f"{where}: unknown key {key!r}{hint}")


def _flag(section: dict[str, Any], key: str, where: str) -> bool:
    value = section.get(key, False)
    if not isinstance(value, bool):
        raise UserError(f"[{where}] {key} = {value!r}: must be true or false")
    return value


def _text(section: dict[str, Any], key: str, where: str, default: str) -> str:
    value = section.get(key, default)
    if not isinstance(value, str):
        raise UserError(f"[{where}] {key} = {value!r}: must be text (in quotes)")
    return value


def _number(section: dict[str, Any], key: str, where: str, default: Any, kind: type,
            low: float, high: float) -> Any:
    value = section.get(key, default)
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int and not isinstance(value, int):
        ok = False
    if not ok or not low <= value <= high:
        kind_name = "a whole number" if kind is int else "a number"
        raise UserError(
            f"[{where}] {key} = {value!r}: must be {kind_name} from {low:g} to {high:g}")
    return kind(value)


def _as_text(raw: Any) -> str:
    if isinstance(raw, bool):
        return "ON" if raw else "OFF"
    return str(raw)
