"""The experiment spec: a TOML file, read strictly and validated against the server's catalog.

Parsing (`load_spec`) checks shape and types and needs no server; `Spec.points(catalog)` checks
every setting against the knobs the server really has, before anything runs.
"""

from __future__ import annotations

import itertools
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from knoblab import datasets, section, workloads
from knoblab import server as targets
from knoblab.catalog import Catalog
from knoblab.errors import UserError
from knoblab.judging import Statistics, Test
from knoblab.keys import Key, Keys
from knoblab.server.shape import KEYS as SHAPE_KEYS
from knoblab.server.shape import Shape
from knoblab.units import parse_size
from knoblab.vocabulary import Experiment, StepRole, StepVerdict
from knoblab.workloads import Workload

TOP_KEYS = Keys(
    Key("name", "The experiment's name, in listings and reports.", "text",
        "the spec file's name"),
    Key("description", "A line of what the experiment asks, kept with its runs."),
    Key("server", "The server under test: sandboxes knoblab starts (the default), or a "
        "running server (kind = \"external\").", "a table"),
    Key("dataset", "The data the workload runs on: the built-in scan table, or your dump.",
        "a table"),
    Key("workload", "What is measured: a query, sysbench, a script or a replay "
        "(its kind).", "a table"),
    Key("sweep", "The settings compared, each with its values (one: a sweep; several: the "
        "full grid); also the workload's parameters and \"machine.*\".",
        "a table of name = [values]"),
    Key("step", "Settings applied one by one ([[step]] tables, in order), each step "
        "cumulative, measured against the one before and the base.", "a list of tables"),
    Key("steps", "How steps are measured ([steps]).", "a table"),
    Key("tie", "Settings that follow another's value at every point (follower = "
        "\"leader\").", "a table of name = \"leader\""),
    Key("statistics", "How comparisons are judged.", "a table"),
    Key("tune", "A search of several settings (knoblab tune): its knobs, budget and goal.",
        "a table"),
    Key("machine", "The shape of every sandbox's machine: memory, CPUs, disk limits, the file "
        "system its data is on.", "a table"),
)
SERVER_KEYS = Keys(
    Key("kind", "\"sandbox\": servers knoblab starts in private folders; \"external\": "
        "a running server, its settings changed in place and always put back.", "text",
        '"sandbox"', choices=tuple(targets.KINDS)),
    Key("config", "Settings for every point ([server.config]), checked like the swept ones; "
        "limits such as max_statement_time bind the workload, not knoblab's own statements.",
        "a table of setting = value"),
    Key("allow_durability_tradeoff", "Settings that let a crash lose or corrupt committed data "
        "(innodb_flush_log_at_trx_commit 0 or 2, sync_binlog other than 1, …) are refused "
        "unless this is true.", "true or false", "false"),
    Key("memory_budget", "A configuration whose estimated memory is above this is refused "
        "before it runs.", 'a size ("16G")', "80% of this machine's memory"),
    Key("password", "Never taken: a password written in a spec is refused (use "
        "password_env or option_file)."),
) | targets.KEYS
STATISTICS_KEYS = Keys(
    Key("min_effect", "Differences smaller than this fraction are never \"worse\"; within "
        "±min_effect of the best is \"equivalent\".", "a number", "0.03",
        bounds="above 0, below 1"),
    Key("alpha", "The chance of a false \"worse\" or \"equivalent\" over the whole run.",
        "a number", "0.05", 1e-9, 0.5),
    Key("confidence", "The confidence of the intervals shown.", "a number", "0.95", 0.5,
        0.9999),
    Key("test", "The test that judges a difference: \"welch-log\" (times: effects "
        "multiply), \"welch\" (throughput) or \"mann-whitney\".", "text",
        "the workload's objective's", choices=("welch-log", "welch", "mann-whitney")),
    Key("seed", "Fixes the interleaved order of the points.", "a whole number", "1", 0,
        2**63 - 1),
)
STEPS_KEYS = Keys(
    Key("one_at_a_time", "Also measure each step's change alone, from the base.",
        "true or false", "false"),
)
SECTION_KEYS: dict[str, Keys] = {
    # read here, and by the kind [server] names (knoblab.server.KINDS): each its own keys
    "server": SERVER_KEYS,
    "dataset": datasets.KEYS,
    "statistics": STATISTICS_KEYS,
    "steps": STEPS_KEYS,
}
MACHINE = "machine."  # a swept name of the sandbox's machine: [sweep] "machine.memory"
TESTS: dict[str, Test] = {"welch-log": "welch-log", "welch": "welch",
                          "mann-whitney": "mann-whitney"}


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
    target: targets.TargetKind  # [server], read by its kind: the servers to measure
    base_config: dict[str, Any]
    workload: Workload  # with its data: a kind's own tables, or the built-in dataset
    sweep: dict[str, list[Any]]
    statistics: Statistics
    steps: list[dict[str, Any]] = field(default_factory=list)  # [[step]] tables, in order
    one_at_a_time: bool = False  # also measure each step's change alone, from the base
    base_dir: Path | None = None  # where the files the spec names are (script files)
    tied: dict[str, str] = field(default_factory=dict)  # follower knob -> leader knob
    allow_durability_tradeoff: bool = False
    memory_budget: int | None = None  # bytes; None = 80% of the machine's memory
    machine: Shape | None = None  # [machine]: every sandbox's memory, CPUs, disk, datadir
    machine_section: dict[str, Any] = field(default_factory=dict)  # as written, for sweeps
    tune: dict[str, Any] | None = None  # [tune], for knoblab tune (read by knoblab.search)
    # swept settings given fewer than two values: said once the name is known to be real
    too_few_values: dict[str, str] = field(default_factory=dict)
    source: str = field(default="", repr=False)

    @property
    def experiment(self) -> Experiment:
        return Experiment.STEPS if self.steps else Experiment.SWEEP

    @property
    def searches(self) -> bool:
        """A spec for knoblab tune ([tune]): it has no points of its own."""
        return self.tune is not None

    def setting_names(self) -> list[str]:
        """Every server setting the spec names (base, sweep, steps), as written."""
        names = [*self.base_config, *self.swept_settings()]
        names += [n for step in self.steps for n in step]
        return list(dict.fromkeys(names))

    def swept_settings(self) -> list[str]:
        """The swept names that are server settings (not the workload's own parameters, nor
        the machine's)."""
        return [n for n in self.sweep if n not in self.workload.parameters
                and not n.startswith(MACHINE)]

    def shape(self, requested: Mapping[str, str]) -> Shape | None:
        """The machine a point's sandbox is given: [machine], with the point's swept
        "machine.*" values."""
        swept = {k[len(MACHINE):]: v for k, v in requested.items() if k.startswith(MACHINE)}
        if not swept:
            return self.machine
        return Shape.from_spec({**self.machine_section, **swept}, self.base_dir)

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
            steps, warnings = self._step_points(catalog, base, lacking)
            # every step on every machine and workload swept: each one a slice of its own
            points = [Point({**{n: r for n, r, _ in combo}, **p.requested}, dict(p.config),
                            dict(p.step) if p.step else None)
                      for combo in itertools.product(*self._slice_axes().values())
                      for p in steps]
            return base, points, warnings
        slice_axes = self._slice_axes()
        axes = []
        for name, values in self.sweep.items():  # in the spec's order
            if name in slice_axes:
                axes.append(slice_axes[name])
                continue
            knob = catalog.knob(name)
            if name in self.too_few_values:
                raise UserError(self.too_few_values[name])
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
                axis.append((knob.name, section.as_text(raw), value))
            axes.append(axis)
        points = []
        for combo in itertools.product(*axes):
            config = {n: v for n, _, v in combo if n not in self.workload.parameters
                      and not n.startswith(MACHINE)}
            points.append(Point({n: r for n, r, _ in combo}, config))
        for follower, leader in self.tied.items():
            self._tie(catalog, follower, leader, base, points)
        return base, points, []

    def _slice_axes(self) -> dict[str, list[tuple[str, str, str]]]:
        """The swept workload parameters and machines: (name, as written, value) per value."""
        axes = {}
        for name, values in self.sweep.items():
            if name in self.workload.parameters:
                axes[name] = [(name, v, v) for v in self.workload.parameter_axis(name, values)]
            elif name.startswith(MACHINE):  # checked when the spec was read
                axes[name] = [(name, section.as_text(v), section.as_text(v)) for v in values]
        return axes

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

        cumulative = [Point({}, {}, {"step": 0, "role": StepRole.CUMULATIVE, "change": {},
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
                    unchanged.append(f"{knob.name} is already {section.as_text(raw)}")
                    continue
                change_req[knob.name], change_config[knob.name] = section.as_text(raw), value
            skip: str | None = None  # why the step is not run
            if unchanged:
                skip = StepVerdict.CHANGES_NOTHING if not change_req else None
                what, left = ("changes nothing", "it was") if skip else \
                    ("partly changes nothing", "that part was")
                warnings.append(f"step {number} {what}: {'; '.join(unchanged)} at that point; "
                                f"{left} left out")
            if missing and not change_req:
                skip = f"not on this server: {', '.join(missing)}"
            requested.update(change_req)
            config.update(change_config)
            shown = change_req or {name: section.as_text(raw) for name, raw in step.items()}
            meta = {"step": number, "role": StepRole.CUMULATIVE, "change": change_req,
                    "label": "+ " + ", ".join(f"{k}={v}" for k, v in shown.items()),
                    "lacking": missing, "skip": skip}
            cumulative.append(Point(dict(requested), dict(config), meta))
            if self.one_at_a_time and number > 1:
                alone.append(Point(dict(change_req), dict(change_config),
                                   {**meta, "role": StepRole.ALONE}))
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
        elif not any(leader_knob.name in point.config for point in points):
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
    _design_only_in_workload(data)
    section.check_keys("the spec", data, TOP_KEYS)
    server = _section(data, "server")
    dataset = _section(data, "dataset")
    workload = _section(data, "workload")
    statistics = _section(data, "statistics")
    kind = workloads.of_section(workload)
    steps = _steps(data)
    search = data.get("tune")
    sweep, too_few = _sweep(data, kind.parameters, steps, search)
    target = targets.of_section(server)
    machine, machine_section = _machine(data, sweep, target.running, base_dir)
    config = _config(server)
    work = kind.from_spec(workload, dataset, sweep, base_dir)
    for name in sweep:
        if name in work.parameters:
            work.parameter_axis(name, sweep[name])  # checked now; used again for the points
    for name in sweep:
        if name in {"sql", "cache", "tables", "table_size", "duration", "rand_type", "size"}:
            extra = ", ".join(sorted(work.parameters))
            raise UserError(f"[sweep] {name}: only server settings and {extra} can be swept")
    tied = data.get("tie", {})
    if not isinstance(tied, dict) or not all(isinstance(v, str) for v in tied.values()):
        raise UserError("[tie] must be a table of follower = \"leader\", e.g. "
                        "max_heap_table_size = \"tmp_table_size\"")
    return Spec(
        name=str(data.get("name", default_name)),
        description=str(data.get("description", "")),
        target=target,
        base_config=config,
        workload=work,
        sweep=sweep,
        statistics=_statistics(statistics, work.objective.test),
        tied=dict(tied),
        steps=steps,
        one_at_a_time=section.flag(_section(data, "steps"), "one_at_a_time", "steps"),
        base_dir=base_dir,
        allow_durability_tradeoff=section.flag(server, "allow_durability_tradeoff", "server"),
        memory_budget=parse_size(server["memory_budget"], "[server] memory_budget")
        if "memory_budget" in server else None,
        machine=machine,
        machine_section=machine_section,
        tune=search,
        too_few_values=too_few,
        source=source,
    )


def _sweep(data: dict[str, Any], parameters: Collection[str], steps: list[dict[str, Any]],
           search: Any) -> tuple[dict[str, list[Any]], dict[str, str]]:
    """[sweep], each value a list (one value alone, a list of one), with the settings given
    fewer than two values and what to say of each: a server setting's name is checked against
    the server's catalog, which parsing does not have, so a misspelled one given a single
    value must hear about its name first (Spec.points). Beside [[step]] tables it holds only
    what the steps are measured on; a search has none."""
    sweep = data.get("sweep")
    if steps and sweep is not None:
        if not isinstance(sweep, dict):
            raise UserError("[sweep] beside [[step]] tables must be a table of what the steps "
                            "are measured on, e.g. \"machine.datadir\" = [\"/mnt/a\", \"/mnt/b\"]")
        settings = [n for n in sweep if not n.startswith(MACHINE) and n not in parameters]
        if settings:
            raise UserError(f"[sweep] {', '.join(settings)} in a steps study: beside [[step]] "
                            "tables, [sweep] takes only what the steps are measured on "
                            "(\"machine.*\", the workload's parameters); put a setting in a "
                            "step, or run the sweep as a spec of its own")
    if search is not None and not isinstance(search, dict):
        raise UserError("[tune] must be a table: [tune] with [tune.knobs] beneath it")
    if search is not None and (steps or sweep is not None):
        raise UserError("a spec has [tune] (a search), or [sweep] or [[step]] tables, not "
                        "both; make the search a spec of its own")
    if search is not None or (steps and sweep is None):
        sweep = {}
    elif not isinstance(sweep, dict) or not sweep:
        raise UserError("[sweep]: give at least one setting with a list of values, "
                        "e.g. read_buffer_size = [\"64K\", \"128K\"]; or apply settings "
                        "one by one with [[step]] tables")
    sweep = dict(sweep)
    too_few: dict[str, str] = {}
    for name, values in sweep.items():
        if isinstance(values, str | int | float | bool):
            sweep[name] = values = [values]
        if not isinstance(values, list) or len(values) < 2:
            problem = f"[sweep] {name}: give a list of at least two values to compare"
            if not isinstance(values, list) or name.startswith(MACHINE) or name in parameters:
                raise UserError(problem)
            too_few[name] = problem
        for value in values:
            if not isinstance(value, str | int | float | bool):
                raise UserError(f"[sweep] {name}: {value!r} is not a single value")
    return sweep, too_few


def _machine(data: dict[str, Any], sweep: dict[str, list[Any]], running: bool,
             base_dir: Path | None) -> tuple[Shape | None, dict[str, Any]]:
    """[machine], the sandboxes' shape, and its section as given; each machine a [sweep]
    "machine.*" key makes checked like [machine]. Refused for a running server, which runs
    on its own machine."""
    machine = None
    if "machine" in data:
        if not isinstance(data["machine"], dict):
            raise UserError("[machine] must be a table, e.g. [machine] with memory = \"2G\" "
                            "beneath it")
        if running:
            raise UserError("[machine]: a running server runs on its own machine; [machine] "
                            "shapes the sandboxes knoblab starts; remove it, or [server] kind")
        machine = Shape.from_spec(data["machine"], base_dir)
    machine_section = dict(data.get("machine") or {})
    for name, values in sweep.items():
        if not name.startswith(MACHINE):
            continue
        if running:
            raise UserError(f"[sweep] {name}: a running server runs on its own machine; "
                            "the machine is swept for sandboxes only")
        key = name[len(MACHINE):]
        if key not in SHAPE_KEYS:
            raise UserError(f"[sweep] {name}: [machine] has no {key!r}; sweep one of "
                            f"{', '.join(MACHINE + k for k in sorted(SHAPE_KEYS))}")
        if key in machine_section:
            raise UserError(f"{name} is both in [machine] and [sweep]; keep one")
        for value in values:  # each one a machine of its own: checked like [machine]
            Shape.from_spec({**machine_section, key: value}, base_dir)
    return machine, machine_section


def _config(server: dict[str, Any]) -> dict[str, Any]:
    """[server.config]: each setting one value."""
    config = server.get("config", {})
    if not isinstance(config, dict):
        raise UserError("[server.config] must be a table of setting = value")
    for name, value in config.items():
        if not isinstance(value, str | int | float | bool):
            raise UserError(f"[server.config] {name} = {value!r}: a setting takes one value "
                            f"(a [server.config.{name}] table or a list is not one), e.g. "
                            f"{name} = \"...\"")
    return config


def _statistics(statistics: dict[str, Any], default_test: str) -> Statistics:
    """[statistics]; its test by default the workload's objective's (times: effects multiply,
    so on the log scale; throughput batch means: plain Welch)."""
    test_name = section.text(statistics, "test", "statistics", default_test)
    test = TESTS.get(test_name)
    if test is None:
        raise UserError(f"[statistics] test = {test_name!r}: use one of {', '.join(TESTS)}")
    min_effect = section.number(statistics, "min_effect", "statistics", 0.03, float, 0.0, 10.0)
    if not 0.0 < min_effect < 1.0:
        raise UserError(f"[statistics] min_effect = {min_effect!r}: must lie between 0 and 1 "
                        "(a fraction: 0.03 means differences within ±3% count as the same)")
    return Statistics(
        min_effect=min_effect,
        alpha=section.number(statistics, "alpha", "statistics", 0.05, float, 1e-9, 0.5),
        confidence=section.number(statistics, "confidence", "statistics", 0.95, float, 0.5,
                                  0.9999),
        test=test,
        seed=section.number(statistics, "seed", "statistics", 1, int, 0, 2**63 - 1),
    )


def _design_only_in_workload(data: dict[str, Any]) -> None:
    """`design` is a key of [workload] alone; written anywhere else it would be an unknown key
    or a setting the server lacks, so it is named with where it goes."""
    server = data.get("server")
    config = server.get("config") if isinstance(server, dict) else None
    steps = data.get("step")
    tables = [("at the top of the spec", data), ("in [server.config]", config),
              *((f"in [{name}]", data.get(name)) for name in sorted(TOP_KEYS.names - {"workload"})),
              *(("in [[step]]", step) for step in (steps if isinstance(steps, list) else []))]
    for where, table in tables:
        if isinstance(table, dict) and "design" in table:
            raise UserError(f"design is written {where}; it belongs under [workload] "
                            "(design = \"auto\", \"blocked\" or \"restarts\"): move it there")


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


def _section(data: dict[str, Any], name: str) -> dict[str, Any]:
    found = data.get(name, {})
    if not isinstance(found, dict):
        raise UserError(f"[{name}] must be a table (a [{name}] section), not a single value")
    if name in SECTION_KEYS:  # [workload]'s keys depend on its kind: checked there
        section.check_keys(f"[{name}]", found, SECTION_KEYS[name])
    return found
