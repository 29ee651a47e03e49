"""sysbench OLTP workloads: prepared once into a template datadir, run with a per-second series.

Written against sysbench 1.0.20 (Debian's), whose facts shape this module:

* The binary is `SysbenchWorkload.binary`: a name looked up on PATH ("sysbench") or a path.
* Its tests are the Lua scripts in /usr/share/sysbench (`SYSBENCH_TESTS`); its distributions
  are those `sysbench --help` lists (`RAND_TYPES`: 1.0.20 has no zipfian). The default
  distribution is "special" (a hot 1% of rows), so knoblab always names one (`rand_type`).
* Options are checked before anything runs against what `sysbench <test> help` and
  `sysbench --help` list (asked once per test and process). sysbench treats '-' and '_' in
  option names alike (`--table-size` = `--table_size`) but is case-sensitive.
* A bad option makes it print "invalid option: --x=1", an unknown test "FATAL: Cannot find
  benchmark ...", both with exit code 1; its FATAL lines go to stdout.
* With --report-interval=1 it prints one line a second, flushed as it goes (a pipe is enough to
  stream them); `--histogram=on` adds the latency histogram before the final report: one row
  per non-empty bucket, "%12.3f |<stars> <count>", the value being the bucket's (log-scale)
  centre in ms. sysbench's own percentile is read from the same buckets.
* Every thread prepares its statements on the server: threads x statements-per-thread must not
  exceed the server's max_prepared_stmt_count (error 1461 at thread start-up kills the run),
  so `command_options()` switches to client-side statements (--db-ps-mode=disable) when it
  would (see `prepared_statements()`).
* The prepared data depends on tables, table_size and the options the Lua `prepare` reads
  (`PREPARE_OPTIONS`): `prepare_key()` hashes exactly those, so every OLTP test with the same
  data shares one template. The data is generated with --rand-type=uniform whatever the run's
  distribution (the column k is drawn from the default distribution at prepare time).
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pymysql

from knoblab import datasets, section, timeseries
from knoblab.catalog import Catalog
from knoblab.connection import Progress, Server
from knoblab.datasets import Dataset
from knoblab.datasets.dump import Dump
from knoblab.errors import UserError
from knoblab.keys import Key, Keys
from knoblab.observe import Observation, SecondSampler
from knoblab.records import Evidence, Metric, Objective, Steady
from knoblab.seconds import Second
from knoblab.stats import StudentT
from knoblab.stats import Summary as StatsSummary
from knoblab.units import threads_text
from knoblab.vocabulary import TrialState
from knoblab.workloads.base import (
    Headline,
    Measured,
    Note,
    Recorder,
    Rounds,
    StoredSeconds,
    StoredTrial,
    Workload,
    WorkloadError,
)

SYSBENCH = "sysbench"  # the default binary; a workload's `binary` field overrides it
SYSBENCH_TESTS = (
    "oltp_read_write", "oltp_read_only", "oltp_write_only", "oltp_point_select", "oltp_insert",
    "oltp_update_index", "oltp_update_non_index", "oltp_delete", "select_random_points",
    "select_random_ranges", "bulk_insert",
)
RAND_TYPES = ("uniform", "gaussian", "special", "pareto")
DEFAULT_MAX_PREPARED_STMT_COUNT = 16382
TIMEOUT_MARGIN = 60.0  # seconds past --time before a run is killed, unless told otherwise

# Options knoblab sets itself (normalised: dashes), and what to use instead.
RESERVED_OPTIONS = {
    "threads": "the workload's threads", "num-threads": "the workload's threads",
    "tables": "the workload's tables", "table-size": "the workload's table_size",
    "rand-type": "the workload's rand_type", "time": "the workload's duration",
    "max-time": "the workload's duration", "rate": "the workload's rate",
    "tx-rate": "the workload's rate", "percentile": "the workload's percentile",
    "mysql-db": "the workload's database", "mysql-socket": None, "mysql-user": None,
    "mysql-password": None, "mysql-host": None, "mysql-port": None, "db-driver": None,
    "report-interval": None, "histogram": None, "report-checkpoints": None, "verbosity": None,
    "config-file": None, "help": None, "version": None,
}
# Options the OLTP `prepare` reads (oltp_common.lua, 1.0.20): they shape the prepared data.
PREPARE_OPTIONS = ("auto-inc", "secondary", "create-secondary", "mysql-storage-engine")
# Tests whose script refuses --tables > 1 (they only use sbtest1).
SINGLE_TABLE_TESTS = ("select_random_points", "select_random_ranges")

_NUM = r"(?:-?nan|-?inf|[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"
_SECOND = re.compile(
    rf"^\[\s*(?P<t>{_NUM})s\s*\]\s+thds:\s*(?P<threads>\d+)\s+tps:\s*(?P<tps>{_NUM})\s+"
    rf"qps:\s*(?P<qps>{_NUM})\s+\(r/w/o:\s*(?P<r>{_NUM})/(?P<w>{_NUM})/(?P<o>{_NUM})\)\s+"
    rf"lat\s+\(ms,\s*\d+%\):\s*(?P<lat>{_NUM})\s+err/s:\s*(?P<err>{_NUM})\s+"
    rf"reconn/s:\s*(?P<reconn>{_NUM})\s*$"
)
_HISTOGRAM_ROW = re.compile(r"^\s*(\d+(?:\.\d+)?)\s+\|\**\s+(\d+)\s*$")
_ERROR_LINE = re.compile(r"^(FATAL|ALERT|invalid option|PANIC)\b|^Error|error:", re.IGNORECASE)
_OPTION_LINE = re.compile(r"^\s+--([A-Za-z0-9][A-Za-z0-9_-]*)")


# --- parsing --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """sysbench's own final report."""

    transactions: int
    tps: float
    queries: int
    qps: float
    ignored_errors: int
    reconnects: int
    total_time: float
    events: int
    latency_min_ms: float
    latency_avg_ms: float
    latency_max_ms: float
    percentile: int  # 0 when sysbench ran with --percentile=0 (latency_pct_ms is then nan)
    latency_pct_ms: float
    histogram: tuple[tuple[float, int], ...]  # (ms, count) rows when --histogram=on, else ()


def parse_second(line: str) -> Second | None:
    """The interval report on this line, or None for any other line."""
    match = _SECOND.match(line.strip())
    if match is None:
        return None
    g = match.group
    return Second(
        t=float(g("t")), threads=int(g("threads")), tps=float(g("tps")), qps=float(g("qps")),
        reads=float(g("r")), writes=float(g("w")), other=float(g("o")),
        latency_ms=float(g("lat")), errors=float(g("err")), reconnects=float(g("reconn")),
    )


def _field(text: str, label: str, value: str = r"(\d+(?:\.\d+)?)") -> re.Match[str] | None:
    return re.search(rf"^\s*{label}:\s*{value}", text, re.MULTILINE)


def parse_summary(text: str) -> Summary | None:
    """sysbench's final report in a run's output; None when it is missing (sysbench died)."""
    start = text.find("SQL statistics:")
    if start < 0:
        return None
    report = text[start:]
    per_sec = r"(\d+)\s*\(\s*(" + _NUM + r")\s+per sec\.\)"
    transactions = _field(report, "transactions", per_sec)
    queries = _field(report, "queries", per_sec)
    ignored = _field(report, "ignored errors", per_sec)
    reconnects = _field(report, "reconnects", per_sec)
    total_time = _field(report, "total time", r"(\d+(?:\.\d+)?)s")
    events = _field(report, "total number of events")
    latency_min = _field(report, "min")
    latency_avg = _field(report, "avg")
    latency_max = _field(report, "max")
    pct = _field(report, r"(\d+)th percentile", r"(\d+(?:\.\d+)?)")
    if transactions is None or queries is None or ignored is None or reconnects is None or \
            total_time is None or events is None or latency_min is None or \
            latency_avg is None or latency_max is None:
        return None
    if pct is not None:
        percentile, latency_pct = int(pct.group(1)), float(pct.group(2))
    elif re.search(r"^\s*percentile stats:\s*disabled", report, re.MULTILINE):
        percentile, latency_pct = 0, math.nan
    else:
        return None
    return Summary(
        transactions=int(transactions.group(1)), tps=float(transactions.group(2)),
        queries=int(queries.group(1)), qps=float(queries.group(2)),
        ignored_errors=int(ignored.group(1)), reconnects=int(reconnects.group(1)),
        total_time=float(total_time.group(1)), events=int(events.group(1)),
        latency_min_ms=float(latency_min.group(1)), latency_avg_ms=float(latency_avg.group(1)),
        latency_max_ms=float(latency_max.group(1)), percentile=percentile,
        latency_pct_ms=latency_pct, histogram=_parse_histogram(text[:start]),
    )


def _parse_histogram(text: str) -> tuple[tuple[float, int], ...]:
    head = text.rfind("Latency histogram")
    if head < 0:
        return ()
    rows = []
    for line in text[head:].splitlines()[1:]:
        match = _HISTOGRAM_ROW.match(line)
        if match:
            rows.append((float(match.group(1)), int(match.group(2))))
    return tuple(rows)


def histogram_percentile(histogram: Iterable[tuple[float, int]], q: float) -> float:
    """The smallest bucket value (ms) whose cumulative count is >= q% of all counts.

    q is in (0, 100]. An empty histogram (no events) gives nan. sysbench itself rounds the rank
    half up (floor(n*q/100 + 0.5)) where this takes the ceiling; the two differ by at most one
    bucket (~1.6% in latency) and only when n*q/100 has a fraction below one half.
    """
    if not 0 < q <= 100:
        raise ValueError(f"percentile {q} is not in (0, 100]")
    rows = sorted(histogram)
    total = sum(count for _, count in rows)
    if total == 0:
        return math.nan
    rank = total * q / 100
    cumulative = 0
    for value, count in rows:
        cumulative += count
        if cumulative >= rank - 1e-9 * total:  # tolerate float error in total*q/100
            return value
    return rows[-1][0]


@dataclass
class RunResult:
    seconds: list[Second]
    summary: Summary | None
    exit_code: int
    error: str | None  # sysbench's FATAL/invalid-option line(s), or why knoblab gave up; None
    command: list[str] = field(default_factory=list)  # the argv that ran (for the record)


# --- sysbench's own option lists -------------------------------------------------------------


def _norm(name: str) -> str:
    """An option name as sysbench matches it: no leading dashes, '_' and '-' alike."""
    return name.strip().lstrip("-").replace("_", "-")


def _help_options(text: str) -> dict[str, str]:
    """Normalised name -> name as listed, from `--name[=value]  description` lines."""
    return {_norm(m.group(1)): m.group(1)
            for m in (_OPTION_LINE.match(line) for line in text.splitlines()) if m}


@cache
def _general_options(binary: str) -> dict[str, str]:
    out = _run_quietly([binary, "--help"])
    options = _help_options(out.stdout)
    if not options:
        raise UserError(f"`{binary} --help` listed no options: is {binary} really sysbench?")
    return options


@cache
def _test_options(binary: str, test: str) -> dict[str, str]:
    out = _run_quietly([binary, test, "help"])
    if out.returncode != 0:
        if "does not implement the 'help' command" in out.stdout:
            return {}  # bulk_insert: a script without options of its own
        raise UserError(f"`{binary} {test} help` failed: {_error_text(out.stdout, ' | ')}")
    return _help_options(out.stdout)


def _run_quietly(argv: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, errors="replace",
                              timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UserError(f"cannot run {argv[0]}: {exc}") from None


def _error_lines(output: str, limit: int = 4) -> list[str]:
    """sysbench's error lines (FATAL, invalid option...), deduplicated, at most `limit`."""
    lines = (line.strip() for line in output.splitlines())
    found = dict.fromkeys(line for line in lines if _ERROR_LINE.search(line))
    return list(found)[:limit]


def _error_text(output: str, sep: str = "\n") -> str:
    """The error lines, else the output's last lines."""
    chosen = _error_lines(output) or [line.strip() for line in output.splitlines()
                                      if line.strip()][-3:]
    return sep.join(chosen) if chosen else "(no output)"


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("on", "true", "yes", "1")


def _value_text(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


# --- the workload ---------------------------------------------------------------------------


# sysbench prepares its own tables: [dataset] is refused, a dump saying why.
_OWN_TABLES = ("[dataset]: sysbench prepares its own tables; set tables and table_size in "
               "[workload] and remove [dataset]")
_REFUSED_DATA = {Dump.kind: "[dataset] dump: sysbench prepares and measures its own tables, "
                            "not a dump's; use [workload] kind = \"script\" to run SQL over a dump"}


@dataclass(frozen=True)
class SysbenchWorkload(Workload):
    """A sysbench test; each measurement is one run's steady-state mean throughput."""

    kind: ClassVar[str] = "sysbench"
    # Throughput: higher is better; judged on the means of server starts (or batch means).
    objective: ClassVar[Objective] = Objective(metric="tps", unit="tps", direction="maximize",
                                               centre="mean", test="welch", time_series=True)
    metrics: ClassVar[Mapping[str, Metric]] = {
        "tps": Metric(None, "tps", "maximize"),
        "p95": Metric("latency_p95_ms", "ms", "minimize"),
        "p99": Metric("latency_p99_ms", "ms", "minimize"),
    }
    parameters: ClassVar[tuple[str, ...]] = ("threads",)
    keys: ClassVar[Keys] = Keys(
        Key("kind", "Concurrent OLTP load from sysbench, on sysbench's own tables (no "
            "[dataset]); the measurement is transactions a second, per second.", "text",
            choices=("sysbench",)),
        Key("test", "sysbench's built-in test (oltp_read_write, oltp_read_only, "
            "oltp_point_select, oltp_insert, …).", "text", '"oltp_read_write"'),
        Key("threads", "Connections running transactions at once; sweepable ([sweep] threads "
            "= [4, 16]: verdicts and charts per count).", "a whole number", "8", 1, 100_000),
        Key("tables", "sysbench's tables, prepared once into a template.", "a whole number",
            "4", 1, 100_000),
        Key("table_size", "Rows in each table.", "a whole number", "100000", 1, 10**10),
        Key("rand_type", "How rows are picked: uniform, gaussian, special or pareto.", "text",
            '"uniform"'),
        Key("duration", "Seconds each run lasts.", "a whole number of seconds", "60", 1,
            10**7),
        Key("rate", "Transactions a second the clients are held to (an open loop); 0: as many "
            "as they can.", "a whole number", "0", 0, 10**9),
        Key("percentile", "The latency percentile sysbench reports with each second.",
            "a whole number", "99", 1, 100),
        Key("warmup", "Seconds dropped before the steady state, or \"auto\": detected "
            "(MSER-5). Shorter than the duration.", '"auto" or a whole number of seconds',
            '"auto"', 0, 10**7),
        Key("window", "Judge only the last N seconds of each run; 0: all of it after the "
            "warm-up.", "a whole number of seconds", "0", 0, 10**7),
        Key("stall_fraction", "A second below this fraction of the steady median is a stall.",
            "a number", "0.1", 0.0, 1.0),
        Key("timeout", "Seconds a run may overrun its duration before it is stopped and the "
            "measurement failed.", "a number of seconds", "60", 1, 7 * 86400),
        Key("options", "Any other option of the test, as a table ([workload.options]), checked "
            "against `sysbench TEST help`.", "a table of option = value"),
    ) | Rounds.KEYS
    # Its tests write; on a sandbox every trial starts from a copy of the prepared data.
    writes_data: ClassVar[bool] = True

    test: str = "oltp_read_write"
    threads: int = 8
    tables: int = 4
    table_size: int = 100_000
    rand_type: str = "uniform"
    duration: int = 60  # seconds (--time)
    rate: int = 0  # --rate, 0 = unlimited
    percentile: int = 99
    options: tuple[tuple[str, str], ...] = ()  # other sysbench options: name (no --) -> value
    database: str = "sbtest"
    binary: str = SYSBENCH  # a name on PATH or a path to the sysbench executable
    # seconds past the duration before a run is killed and its measurement failed
    overrun: float = TIMEOUT_MARGIN
    rounds: Rounds = Rounds()
    steady: Steady | None = field(default_factory=Steady)

    # A run lasts a fixed time: its work is what it managed, counted in transactions.
    unit_of_work: ClassVar[str] = "transaction"

    @property
    def least_seconds(self) -> float:
        return float(self.duration)

    @classmethod
    def work_done(cls, details: Mapping[str, Any]) -> float | None:
        transactions = details.get("transactions")
        return float(transactions) if transactions else None

    def __post_init__(self) -> None:
        options = self.options.items() if isinstance(self.options, dict) else self.options
        object.__setattr__(self, "options", tuple(
            (str(name).strip().lstrip("-"), _value_text(value)) for name, value in options))

    # -- the spec -----------------------------------------------------------------------------

    @classmethod
    def from_spec(cls, workload: dict[str, Any], dataset: dict[str, Any],
                  sweep: dict[str, list[Any]], base_dir: Path | None) -> SysbenchWorkload:
        if dataset:
            raise UserError(_REFUSED_DATA.get(datasets.kind_of(dataset), _OWN_TABLES))

        def integer(key: str, default: int, low: int, high: int) -> int:
            return int(section.number(workload, key, "workload", default, int, low, high))

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
        steady = Steady(
            warmup=None if warmup == "auto" else warmup,
            window=window or None,
            stall_fraction=section.number(workload, "stall_fraction", "workload", 0.10, float,
                                          0.0, 1.0),
        )
        if steady.warmup is not None and steady.warmup >= duration:
            raise UserError(f"[workload] warmup = {steady.warmup}: must be shorter than the "
                            f"duration ({duration} s)")
        return cls(
            test=section.text(workload, "test", "workload", "oltp_read_write"),
            threads=integer("threads", 8, 1, 100_000),
            tables=integer("tables", 4, 1, 100_000),
            table_size=integer("table_size", 100_000, 1, 10**10),
            rand_type=section.text(workload, "rand_type", "workload", "uniform"),
            duration=duration,
            rate=integer("rate", 0, 0, 10**9),
            percentile=integer("percentile", 99, 1, 100),
            options=tuple(sorted((str(k), section.as_text(v)) for k, v in options.items())),
            overrun=section.number(workload, "timeout", "workload", TIMEOUT_MARGIN, float, 1.0,
                                   7 * 86400.0),
            rounds=Rounds.from_spec(workload),
            steady=steady,
        )

    def parameter_axis(self, name: str, values: list[Any]) -> list[str]:
        """Swept thread counts: whole numbers of at least 1."""
        axis: list[str] = []
        for raw in values:
            if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
                raise UserError(f"[sweep] {name} = {raw!r}: must be whole numbers of at least 1")
            if str(raw) in axis:
                raise UserError(f"[sweep] {name}: {raw} is listed twice; list each value once")
            axis.append(str(raw))
        return axis

    def check(self, catalog: Catalog, settings: Mapping[str, str]) -> None:
        """Everything sysbench would refuse, against the server's statement limit."""
        statements = settings.get("max_prepared_stmt_count",
                                  catalog.knobs["max_prepared_stmt_count"].default)
        self.validate(max_prepared_stmt_count=int(statements or
                                                  DEFAULT_MAX_PREPARED_STMT_COUNT))

    def dataset(self, requested: Mapping[str, str]) -> SysbenchTables:
        return SysbenchTables(self)

    def connections_for(self, requested: Mapping[str, str]) -> int:
        return int(requested.get("threads", self.threads)) + 2

    @classmethod
    def notes(cls, points: Sequence[tuple[str, Evidence]]) -> list[Note]:
        """What the errors column counts (the column is always there: always said)."""
        return [(f"{ERRORS_MEANING[0].upper()}{ERRORS_MEANING[1:]}.", False)] if points else []

    @classmethod
    def headline(cls, described: Mapping[str, Any], swept: Collection[str]) -> Headline:
        test, duration = described.get("test"), described.get("duration")
        tables, rows = described.get("tables"), described.get("table_size")
        more = [f"{tables}×{rows:,} rows" if tables is not None and rows is not None else "",
                str(described.get("rand_type") or ""),
                f"rate {described['rate']} tps" if described.get("rate") else ""]
        return Headline(f"{cls.kind} {test or '?'}", f"{cls.kind} {test or ''}".strip(),
                        ("threads swept" if "threads" in swept
                         else threads_text(described.get("threads")),),
                        tuple(m for m in more if m), f"{duration} s" if duration else None)

    def describe(self) -> dict[str, object]:
        return {"test": self.test, "threads": self.threads, "tables": self.tables,
                "table_size": self.table_size, "rand_type": self.rand_type,
                "duration": self.duration, "rate": self.rate, "options": dict(self.options)}

    # -- the measurement ----------------------------------------------------------------------

    def measure(self, server: Server, requested: Mapping[str, str], session_knobs: list[str],
                recorder: Recorder) -> Measured:
        """One run; its value is the steady-state mean throughput."""
        threads = int(requested.get("threads", self.threads))
        with Observation(server) as seen, SecondSampler(server.pid) as sampler:
            def on_second(second: Second) -> None:
                recorder.second(second)
                recorder.os_seconds(sampler.take())

            result = self.run(server, on_second, threads=threads)
        recorder.os_seconds(sampler.take())
        if result.error is not None or not result.seconds:
            # The seconds already stored stay with the trial, marked failed.
            raise WorkloadError(f"sysbench failed after {len(result.seconds)} s: "
                                f"{result.error or 'no per-second report'}")
        steady = self.steady or Steady()
        series = timeseries.summarize_series(
            [s.tps for s in result.seconds], warmup=steady.warmup, last=steady.window,
            stall_fraction=steady.stall_fraction)
        summary = result.summary
        details: dict[str, Any] = {
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
        return Measured(series.mean, details)

    # -- the results --------------------------------------------------------------------------

    @classmethod
    def samples(cls, trials: list[StoredTrial], stored: StoredSeconds,
                statistics: Mapping[str, Any]) -> list[float]:
        samples: list[float] = cls.evidence(trials, None, stored, statistics)["samples"]
        return samples

    @classmethod
    def evidence(cls, trials: list[StoredTrial], summary: StatsSummary | None,
                 stored: StoredSeconds, statistics: Mapping[str, Any]) -> dict[str, Any]:
        return series_evidence(trials, stored.seconds(), stored.os_seconds(), statistics)

    # -- checks -------------------------------------------------------------------------------

    def validate(self, max_prepared_stmt_count: int = DEFAULT_MAX_PREPARED_STMT_COUNT) -> None:
        """Raise a one-line UserError (saying how to fix it) for anything sysbench would refuse.

        max_prepared_stmt_count matters only when the options force --db-ps-mode=auto: otherwise
        too many statements are avoided by `command_options()`, not refused.
        """
        path = self.executable()
        if self.test not in SYSBENCH_TESTS:
            close = difflib.get_close_matches(self.test, SYSBENCH_TESTS, n=1, cutoff=0.8)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise UserError(f"unknown sysbench test {self.test!r}: {hint}use one of "
                            f"{', '.join(SYSBENCH_TESTS)}")
        if self.rand_type not in RAND_TYPES:
            raise UserError(f"unknown sysbench rand_type {self.rand_type!r}: use one of "
                            f"{', '.join(RAND_TYPES)}")
        for name in ("threads", "tables", "table_size", "duration"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UserError(f"sysbench {name} = {value!r}: must be a whole number >= 1")
        if not isinstance(self.rate, int) or self.rate < 0:
            raise UserError(f"sysbench rate = {self.rate!r}: must be >= 0 (0 = unlimited)")
        if not isinstance(self.percentile, int) or not 1 <= self.percentile <= 100:
            raise UserError(f"sysbench percentile = {self.percentile!r}: must be 1 to 100")
        if not re.fullmatch(r"[A-Za-z0-9_]{1,64}", self.database):
            raise UserError(f"sysbench database {self.database!r}: use letters, digits and _")
        if self.test in SINGLE_TABLE_TESTS and self.tables != 1:
            raise UserError(f"sysbench {self.test} uses one table only: set tables = 1")

        known = {**_general_options(path), **_test_options(path, self.test)}
        seen: set[str] = set()
        for name, _value in self.options:
            key = _norm(name)
            if key in RESERVED_OPTIONS:
                instead = RESERVED_OPTIONS[key]
                fix = f"use {instead} instead" if instead else "remove it from the options"
                raise UserError(f"sysbench option {name!r} is set by knoblab itself: {fix}")
            if key not in known:
                close = difflib.get_close_matches(key, list(known), n=3, cutoff=0.6)
                hint = f"did you mean {', '.join(known[c] for c in close)}? " if close else ""
                raise UserError(
                    f"sysbench {self.test} has no option {name!r}: {hint}(see `sysbench "
                    f"{self.test} help` and `sysbench --help`)")
            if key in seen:
                raise UserError(f"sysbench option {name!r} is given twice: keep one")
            seen.add(key)
        ps_mode = self._option("db-ps-mode")
        if ps_mode is not None and ps_mode != "disable" and \
                self.prepared_statements() > max_prepared_stmt_count:
            raise UserError(
                f"sysbench would prepare {self.prepared_statements()} statements "
                f"(threads x statements per thread) but max_prepared_stmt_count is "
                f"{max_prepared_stmt_count}: drop db-ps-mode from the options (knoblab then "
                f"disables server-side statements), use fewer threads or raise the limit")

    def executable(self) -> str:
        """The sysbench binary's path; a UserError when there is none."""
        if os.sep in self.binary:
            if os.path.isfile(self.binary) and os.access(self.binary, os.X_OK):
                return str(Path(self.binary).resolve())
            raise UserError(f"sysbench binary {self.binary} does not exist or is not "
                            "executable: fix the path, or install it: apt-get install sysbench")
        found = shutil.which(self.binary)
        if found is None:
            raise UserError(f"{self.binary} is not on PATH: install it: apt-get install sysbench")
        return found

    def _option(self, name: str) -> str | None:
        for key, value in self.options:
            if _norm(key) == name:
                return value
        return None

    def _flag(self, name: str, default: bool) -> bool:
        value = self._option(name)
        return default if value is None else _truthy(value)

    def prepared_statements(self, threads: int | None = None) -> int:
        """Server-side prepared statements the run holds open: threads x per thread.

        Per thread, from the 1.0.20 scripts: BEGIN and COMMIT (unless skip_trx) plus, per table,
        read_write 9 (point, 4 ranges unless range_selects=off, 2 updates, delete, insert),
        read_only 5, write_only 4, point_select / update_index / update_non_index / delete 1;
        select_random_* 1 in all; oltp_insert and bulk_insert send plain queries.
        """
        threads = threads or self.threads
        trx = 0 if self._flag("skip-trx", False) else 2
        ranges = 4 if self._flag("range-selects", True) else 0
        per_table, fixed = {
            "oltp_read_write": (1 + ranges + 4, trx),
            "oltp_read_only": (1 + ranges, trx),
            "oltp_write_only": (4, trx),
            "oltp_point_select": (1, 0),
            "oltp_update_index": (1, 0),
            "oltp_update_non_index": (1, 0),
            "oltp_delete": (1, 0),
            "select_random_points": (0, 1),
            "select_random_ranges": (0, 1),
        }.get(self.test, (0, 0))
        return threads * (per_table * self.tables + fixed)

    # -- commands -----------------------------------------------------------------------------

    def command_options(self, *, threads: int | None = None,
                        max_prepared_stmt_count: int = DEFAULT_MAX_PREPARED_STMT_COUNT,
                        ) -> list[str]:
        """The `run` options (all but the connection): knoblab's, then the user's.

        Every thread prepares its statements on the server, and the server refuses more than
        max_prepared_stmt_count in all (error 1461: sysbench dies at thread start-up). When
        threads x statements per thread would exceed it and the options do not say otherwise,
        --db-ps-mode=disable is added: sysbench then sends plain queries, which measures
        slightly more parsing than the default but runs at all.
        """
        threads = threads or self.threads
        argv = [f"--threads={threads}"]
        if self.test != "bulk_insert":  # it has one table per thread and no table size
            argv += [f"--tables={self.tables}", f"--table-size={self.table_size}"]
        argv += [
            f"--rand-type={self.rand_type}", f"--time={self.duration}", f"--rate={self.rate}",
            f"--percentile={self.percentile}", "--report-interval=1", "--histogram=on",
        ]
        argv += [f"--{name}={value}" for name, value in self.options]
        if self._option("db-ps-mode") is None and \
                self.prepared_statements(threads) > max_prepared_stmt_count:
            argv.append("--db-ps-mode=disable")
        return argv

    def _connection(self, server: Server) -> list[str]:
        if server.socket is None:
            raise WorkloadError("sysbench needs the server's unix socket on this machine")
        return [f"--mysql-socket={server.socket}", "--mysql-user=root",
                f"--mysql-db={self.database}"]

    def run_command(self, server: Server, *, threads: int | None = None,
                    max_prepared_stmt_count: int = DEFAULT_MAX_PREPARED_STMT_COUNT) -> list[str]:
        return [self.executable(), self.test, *self._connection(server),
                *self.command_options(threads=threads,
                                      max_prepared_stmt_count=max_prepared_stmt_count), "run"]

    # -- prepared data ------------------------------------------------------------------------

    def _prepare_options(self) -> list[tuple[str, str]]:
        return sorted((_norm(name), value.strip().lower()) for name, value in self.options
                      if _norm(name) in PREPARE_OPTIONS)

    def prepare_key(self) -> str:
        """Names the template datadir: a hash of what determines the prepared data."""
        if self.test == "bulk_insert":
            # Its tables (one per thread, empty) are made right before each run.
            data: dict[str, object] = {"v": 1, "kind": "bulk_insert", "db": self.database}
        else:
            table_size = self.table_size
            if self.test == "oltp_insert" and not self._flag("auto-inc", True):
                table_size = 0  # oltp_insert prepares empty tables then (no id collisions)
            data = {"v": 1, "kind": "oltp", "db": self.database, "tables": self.tables,
                    "table_size": table_size, "options": self._prepare_options()}
        text = json.dumps(data, sort_keys=True)
        return "sysbench-" + hashlib.sha256(text.encode()).hexdigest()[:12]

    def prepare(self, server: Server) -> None:
        """Create the database and sysbench's tables on the server (a parallel prepare).

        Raises WorkloadError with sysbench's error lines when it fails.
        """
        self.validate()
        conn = server.connect()
        try:
            conn.query(f"CREATE DATABASE IF NOT EXISTS `{self.database}`")
        except pymysql.MySQLError as exc:
            raise WorkloadError(f"creating database {self.database} failed: {exc.args[-1]}") \
                from None
        finally:
            conn.close()
        if self.test == "bulk_insert":
            return
        # cmd_prepare is a PARALLEL_COMMAND: thread i fills tables i, i+threads, ...
        parallel = max(1, min(self.tables, os.cpu_count() or 1))
        argv = [self.executable(), self.test, *self._connection(server),
                f"--tables={self.tables}", f"--table-size={self.table_size}",
                f"--threads={parallel}", "--rand-type=uniform",
                *(f"--{name}={value}" for name, value in self.options
                  if _norm(name) in PREPARE_OPTIONS), "prepare"]
        self._run_step(argv, "prepare")

    def _run_step(self, argv: list[str], what: str) -> None:
        # run() kills the child on any exception, Ctrl-C included; start_new_session keeps a
        # terminal Ctrl-C from reaching sysbench before knoblab has seen it.
        out = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, errors="replace",
                             start_new_session=True, check=False)
        if out.returncode != 0:
            raise WorkloadError(f"sysbench {self.test} {what} failed (exit {out.returncode}): "
                                f"{_error_text(out.stdout, ' | ')}")

    # -- the run ------------------------------------------------------------------------------

    def run(self, server: Server, on_second: Callable[[Second], None], *,
            threads: int | None = None, timeout: float | None = None) -> RunResult:
        """Run the test, calling on_second for each interval line as sysbench prints it.

        Failures of the run itself (sysbench's exit code, no final report, the timeout, by
        default duration + timeout) come back in RunResult.error with the seconds seen so far.
        On an exception (Ctrl-C, or one raised by on_second) sysbench is killed and it
        propagates.
        """
        self.validate()
        if threads is not None and threads < 1:
            raise UserError(f"sysbench threads = {threads}: must be a whole number >= 1")
        threads = threads or self.threads
        timeout = self.duration + self.overrun if timeout is None else timeout
        limit = _max_prepared_stmt_count(server)
        self.validate(limit)  # an explicit db-ps-mode=auto against the server's real limit
        argv = self.run_command(server, threads=threads, max_prepared_stmt_count=limit)
        seconds: list[Second] = []
        if self.test == "bulk_insert":
            try:  # one fresh, empty table per thread, whatever ran on this server before
                base = [argv[0], self.test, *self._connection(server), f"--threads={threads}"]
                self._run_step([*base, "cleanup"], "cleanup")
                self._run_step([*base, "prepare"], "prepare")
            except WorkloadError as exc:
                return RunResult(seconds, None, 1, str(exc), argv)

        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, errors="replace", bufsize=1,
            start_new_session=True,  # a terminal Ctrl-C reaches knoblab, not sysbench
        )
        timed_out = threading.Event()

        def kill_on_timeout() -> None:
            if process.poll() is None:  # not when sysbench finished just in time
                timed_out.set()
                _kill(process)

        timer = threading.Timer(timeout, kill_on_timeout)
        timer.daemon = True
        output: list[str] = []
        try:
            timer.start()
            assert process.stdout is not None
            for line in process.stdout:  # sysbench flushes each line: this is real time
                output.append(line)
                second = parse_second(line)
                if second is not None:
                    seconds.append(second)
                    on_second(second)
            exit_code = process.wait()
        except BaseException:
            _kill(process)
            process.wait()
            raise
        finally:
            timer.cancel()
            if process.stdout is not None:
                process.stdout.close()

        text = "".join(output)
        summary = parse_summary(text)
        errors = _error_lines(text)
        error = None
        if timed_out.is_set():
            error = "\n".join([f"sysbench did not finish within {timeout:g} s and was killed",
                               *errors])
        elif exit_code != 0:
            error = "\n".join(errors) or \
                f"sysbench exited with code {exit_code}: {_error_text(text, ' | ')}"
        elif summary is None:
            error = "\n".join(["sysbench printed no final report", *errors])
        return RunResult(seconds, summary, exit_code, error, argv)


@dataclass(frozen=True)
class SysbenchTables(Dataset):
    """sysbench's own tables, made by its `prepare` from [workload] (tables, table_size and
    the options the prepare reads): the data of a sysbench run."""

    work: SysbenchWorkload

    @property
    def key(self) -> str:
        return f"sysbench-{self.work.prepare_key()}"

    @property
    def workload_database(self) -> str:
        return self.work.database

    def label(self, then: str = "") -> str:
        return f"sysbench {self.work.tables} tables × {self.work.table_size:,} rows{then}"

    def build(self, server: Server, progress: Progress | None = None) -> None:
        self.work.prepare(server)

    def estimated_bytes(self) -> int:
        # An InnoDB sbtest row with its index: ~230 bytes.
        return self.work.tables * self.work.table_size * 300

    def check_running_server(self, where: str) -> None:
        raise UserError("sysbench runs need a sandbox server: on a running server its tables "
                        "and passwords would live outside knoblab's own database; use kind = "
                        "\"query\" or \"script\", or remove [server] kind")


def _kill(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGKILL)


# --- results ---------------------------------------------------------------------------------

# What the report's "errors" column counts (sysbench's "err/s", summed over a point's runs): the
# errors sysbench 1.0 ignores by default (--mysql-ignore-errors=1213,1020,1205) roll back the
# transaction, which it runs again: no transaction failed for them, each cost a retry.
ERRORS_MEANING = ("errors: transactions sysbench rolled back and ran again after an error it "
                  "ignores (1213 deadlock, 1205 lock wait timeout, 1020 record changed), summed "
                  "over the point's runs: none was lost, but each retry cost throughput "
                  "(reconn.: connections sysbench opened again)")


def series_evidence(trials: list[StoredTrial], seconds: dict[int, list[dict[str, float]]],
                    os_seconds: dict[int, list[dict[str, float]]],
                    statistics: Mapping[str, Any]) -> dict[str, Any]:
    """Steady-state throughput of a point's trials, pooled, with its batch means for the test."""
    series, windows = [], []
    os_series = [{"repetition": t.repetition,
                  **{name: [row[name] for row in os_seconds[t.id]]
                     for name in ("t", "cpu_user", "cpu_system", "cpu_iowait",
                                  "disk_read_bytes", "disk_write_bytes")}}
                 for t in trials if os_seconds.get(t.id)]
    for trial in trials:
        if trial.status not in (TrialState.DONE, TrialState.FAILED):
            continue
        rows = seconds.get(trial.id, [])
        steady = trial.details.get("steady") or {}
        window = [steady.get("start", 0), steady.get("end", len(rows))]
        series.append({"repetition": trial.repetition, "status": trial.status,
                       "t": [r["t"] for r in rows], "tps": [r["tps"] for r in rows],
                       "steady": window})
        if trial.status == TrialState.DONE and rows:
            windows.append([r["tps"] for r in rows][window[0]:window[1]])
    done = [t for t in trials if t.status == TrialState.DONE]
    evidence: dict[str, Any] = {"series": series, "os_series": os_series, "samples": [],
                                "regime": None}
    if not windows:
        return {**evidence, "mean": None, "median": None, "stdev": None, "cv": None,
                "ci95": None, "latency_p95_ms": None, "latency_p99_ms": None,
                "stall_seconds": 0, "zero_seconds": 0, "longest_stall": 0, "sql_errors": 0,
                "reconnects": 0}
    pooled = np.concatenate([np.asarray(w, dtype=float) for w in windows])
    size = max(timeseries.batch_size(w) for w in windows)
    batches = [m for w in windows for m in timeseries.batch_means(w, size)] or \
        [float(np.mean(w)) for w in windows]
    # The unit of replication is the server start: starts differ by a few percent, so seconds
    # (or batches) of one start are not independent samples of the configuration. With one
    # start per value only batch means remain, and they compare runs, not configurations.
    starts = [float(np.mean(w)) for w in windows]
    samples = starts if len(starts) >= 2 else batches
    mean = float(np.mean(samples))  # what the test compares and the interval is about
    stdev = float(pooled.std(ddof=1)) if pooled.size > 1 else 0.0
    steadies = [t.details.get("steady", {}) for t in done]
    return {
        **evidence,
        "samples": samples,
        "compared": "server starts" if len(starts) >= 2 else "batch means of one start",
        "mean": mean,
        "median": float(np.median(pooled)),
        "stdev": stdev,
        "cv": stdev / mean if mean else None,
        "ci95": _mean_interval(samples, statistics.get("confidence", 0.95)),
        "latency_p95_ms": _median(t.details.get("latency_p95_ms") for t in done),
        "latency_p99_ms": _median(t.details.get("latency_p99_ms") for t in done),
        "stall_seconds": sum(s.get("stall_seconds", 0) for s in steadies),
        "zero_seconds": sum(s.get("zero_seconds", 0) for s in steadies),
        "longest_stall": max((s.get("longest_stall", 0) for s in steadies), default=0),
        "sql_errors": round(sum(t.details.get("errors", 0) for t in done)),
        "reconnects": round(sum(t.details.get("reconnects", 0) for t in done)),
    }


def _mean_interval(samples: list[float], confidence: float) -> list[float]:
    """t-interval of the mean throughput from per-start means (or, with one start, batch
    means: near-independent, unlike the raw seconds).

    On the log scale when every sample is positive: throughput is positive and starts differ
    by a factor, so a symmetric interval on tps from 2 samples (t = 12.7 with 1 degree of
    freedom) reaches below zero and was clipped to a meaningless "0–4,285 tps"; exp(mean(log)
    ± t·s/√k) stays positive and widens upward as a ratio does. A sample at 0 (a start that
    stalled throughout) has no logarithm: then the interval is on tps itself, and a lower
    bound of 0 is what was observed, not an artefact."""
    k = len(samples)
    x = np.asarray(samples, dtype=float)
    mean = float(np.mean(x)) if k else 0.0
    if k < 2:
        return [mean, mean]
    t = float(StudentT.ppf((1 + confidence) / 2, k - 1))
    if np.all(x > 0):
        logs = np.log(x)
        half = t * float(np.std(logs, ddof=1)) / math.sqrt(k)
        centre = float(np.mean(logs))
        # The arithmetic mean is reported; it lies above the geometric centre, so make sure
        # the interval holds it (it nearly always does).
        return [min(math.exp(centre - half), mean), max(math.exp(centre + half), mean)]
    half = t * float(np.std(x, ddof=1)) / math.sqrt(k)
    return [max(0.0, mean - half), mean + half]


def _median(values: Any) -> float | None:
    items = [v for v in values if v is not None]
    return float(np.median(items)) if items else None



def _max_prepared_stmt_count(server: Server) -> int:
    """The server's real limit (it may be one of the settings under test)."""
    try:
        value = server.global_values(["max_prepared_stmt_count"]).get("max_prepared_stmt_count")
        return int(value) if value is not None else DEFAULT_MAX_PREPARED_STMT_COUNT
    except (pymysql.MySQLError, ValueError):
        return DEFAULT_MAX_PREPARED_STMT_COUNT
