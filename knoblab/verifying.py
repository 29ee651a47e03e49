"""`knoblab verify`: a recommendation checked on the production server itself, under its own
load: production's own values (A) and the recommendation's (B) alternate in windows, and the
difference is decided with the sequential statistics of a sweep.

Nothing runs on the server but its own load. knoblab reads counters (SHOW GLOBAL STATUS, every
half second) and sets the recommendation's settings with SET GLOBAL, journalled first as every
change to a running server is (`knoblab.server.external.Settings`): at the end, on a signal,
on an error they are put back and read back; after a kill -9 `knoblab restore` does it. One
verify or capture per server at a time: both hold the server's capture lock.

A window's figures come from what the server keeps, without a restart or a plugin:
- statements a second: `Questions` (knoblab's own reads taken out);
- mean statement latency by Little's law: `Threads_running` (knoblab's own reading taken out)
  averaged over the window, divided by the statement rate. It holds in an open loop (the
  application's demand the same in A and B: the rate is, the latency moves) and in a closed
  one (a fixed number of connections: the rate moves, the latency with it). It decides;
- pages read from disk, rows read and temporary tables on disk, per statement; errors a
  second; the server's CPU per statement where it runs on this machine;
- where performance_schema is on, the statements' own mean latency and each digest's
  (`events_statements_summary_by_digest`, read at each window's start and end): a measured
  latency beside Little's law's, and which statements the change moved.

The windows come in pairs, one of A and one of B, the first pair's order drawn at random and
each next pair's the other way round (ABBA): a trend in the load does not read as an effect,
and a switch happens once a pair. After each switch a buffer pool resize is waited for and the
settle time left out of the figures. Each pair gives the log ratio of A's latency to B's; from
the third pair on, a look decides at the sequential levels of `knoblab.stats` (helps, hurts,
the same within ±min_effect), or the time runs out (not shown).

Guard rails, said before anything changes: while B is in force, each sample compares the last
few seconds with A's figures; latency, Threads_running or errors past their bound put A back
at once, and verify ends saying how long B was in force after the bound was crossed.

Settings it cannot verify live are named with why: a restart-only one, one the account may
not set, and one with a session value (SET GLOBAL reaches only connections opened after it,
not the application's pool, which keeps the values it opened with).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import socket
import time
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psutil
import pymysql

from knoblab import __version__, section
from knoblab.catalog import Catalog
from knoblab.connection import one
from knoblab.errors import UserError, shielded
from knoblab.server.external import ExternalServer, PutBack, Settings, refusal
from knoblab.server.query_log import hold_lock
from knoblab.server.settings import own_session
from knoblab.stats import Levels, Statistics, StudentT
from knoblab.store import RunInfo
from knoblab.units import format_duration, format_size, parse_size
from knoblab.vocabulary import Experiment, Finding, RunStatus, TrialState, VerifyStop

SAMPLE = 0.5  # seconds between two readings of the server's counters
# Threads_running is read this often in between: at a low load it is mostly 0 or 1, and its
# mean over a window (Little's law's L) needs many readings to be more than noise.
RUNNING_EVERY = 0.05
RUNNING = "knoblab_running"  # a reading's mean Threads_running since the reading before
RAN = "knoblab_ran"  # the statements knoblab's reader had run by a reading (in Questions)
GUARD_SPAN = 5.0  # seconds of samples the guard judges B on
# A B window this long is also judged whole against A's mean: a harm that lasts is put back
# even where A's own short stretches vary as much (a busy machine, a spiky load).
SUSTAINED = 2 * GUARD_SPAN
FLOOR = 3  # pairs before the first look
RESIZE_WAIT = 300.0  # the longest a buffer pool resize is waited for
ERROR_COUNTERS = ("Aborted_clients", "Aborted_connects", "Innodb_deadlocks",
                  "Connection_errors_internal", "Connection_errors_max_connections")
ROWS_READ = ("Handler_read_first", "Handler_read_key", "Handler_read_last", "Handler_read_next",
             "Handler_read_prev", "Handler_read_rnd", "Handler_read_rnd_next")
COUNTERS = ("Questions", "Threads_running", "Threads_connected", "Com_commit", "Com_rollback",
            "Innodb_buffer_pool_reads", "Innodb_buffer_pool_read_requests",
            "Created_tmp_disk_tables", "Innodb_buffer_pool_resize_status",
            *ERROR_COUNTERS, *ROWS_READ)
DIGESTS = 10  # the digests shown, the most run first
# knoblab's own readings, which the digest table counts with the application's statements
OWN_DIGESTS = ("SHOW ", "SELECT `VARIABLE_VALUE` FROM `information_schema`",
               "SELECT `SCHEMA_NAME` , `DIGEST` , `DIGEST_TEXT`")
A, B = 0, 1  # the points: production's own values, the recommendation's
SIDE = {A: "A (production's own)", B: "B (recommended)"}


@dataclass(frozen=True)
class Guard:
    """The bounds past which B is put back, relative to A's figures."""

    latency: float = 2.0  # B's latency over its last GUARD_SPAN s, as a multiple of A's
    running: float = 3.0  # Threads_running, as a multiple of A's (plus SLACK)
    errors: float = 1.0  # errors a second beyond A's rate

    SLACK = 2.0  # Threads_running a server near idle may reach by chance

    def said(self) -> str:
        return (f"guard: B is put back at once if, over any {GUARD_SPAN:g} s, its mean "
                f"statement latency exceeds {self.latency:g}× A's, Threads_running exceeds "
                f"{self.running:g}× A's + {self.SLACK:g}, or errors exceed A's rate by "
                f"{self.errors:g} a second (--guard-latency, --guard-running, --guard-errors)")


@dataclass(frozen=True)
class Request:
    spec: Path
    source: str  # --from: a recommended.cnf, a report folder, a study
    seconds: float  # --for: the most the verify takes
    window: float
    settle: float
    guard: Guard = field(default_factory=Guard)


@dataclass(frozen=True)
class Claim:
    """What the sandbox measured of the recommendation: a ratio of its objective (1.6: 1.6×
    better) and its interval at `confidence`."""

    ratio: float
    low: float
    high: float
    confidence: float
    said: str


@dataclass(frozen=True)
class Recommendation:
    settings: dict[str, str]  # name -> value, as written
    claim: Claim | None
    origin: str


class VerifyView(Protocol):
    def message(self, text: str) -> None: ...

    def progress(self, total: float) -> Callable[[float, str], None]:
        """Starts the bar of the whole verify; the callable takes (elapsed, what now)."""

    def close(self) -> None: ...


class Tripped(Exception):
    """The guard put A back: what crossed its bound, and when."""

    def __init__(self, said: str, crossed_at: float, window: Window) -> None:
        super().__init__(said)
        self.said, self.crossed_at, self.window = said, crossed_at, window


# --- the recommendation -----------------------------------------------------------------------


def read_recommendation(source: str, store: Any) -> Recommendation:
    """The settings to verify and the sandbox's claim for them: a recommended.cnf (the claim
    from the tune.json beside it, if any), a report folder holding one, or a tuning study of
    the store (study:NAME)."""
    from knoblab.studies import PREFIX, stored_result

    path = Path(source).expanduser()
    if source.startswith(PREFIX) and not path.exists():
        from knoblab.report.tuning import tune_json

        result, _ = stored_result(store, source[len(PREFIX):])
        recommended = tune_json(result)["recommended"]
        if not recommended or not recommended.get("changes"):
            raise UserError(f"--from {source}: the study recommends nothing (no change was "
                            "shown to help): there is nothing to verify")
        return Recommendation(dict(recommended["changes"]), _claim(recommended), source)
    if path.is_dir():
        path = path / "recommended.cnf"
        if not path.is_file():
            raise UserError(f"--from {source}: the folder holds no recommended.cnf; give a "
                            "knoblab tune or run report folder, a recommended.cnf, or "
                            "study:NAME")
    elif not path.is_file():
        raise UserError(f"--from {source}: no such file or folder; give a recommended.cnf, a "
                        "report folder holding one, or study:NAME")
    settings = _cnf_settings(path)
    if not settings:
        raise UserError(f"--from {source}: {path} sets nothing (no name = value line under "
                        "[mysqld]): there is nothing to verify")
    claim = None
    beside = path.parent / "tune.json"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        recommended = json.loads(beside.read_text())["recommended"]
        if recommended and _same_settings(recommended.get("changes") or {}, settings):
            claim = _claim(recommended)
    return Recommendation(settings, claim, str(path))


def _cnf_settings(path: Path) -> dict[str, str]:
    settings: dict[str, str] = {}
    section = ""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip().lower()
        elif "=" in line and section in ("mysqld", "mariadb", "server", "mariadbd"):
            name, value = (part.strip() for part in line.split("=", 1))
            settings[name.replace("-", "_").lower()] = value.strip("\"'")
    return settings


def _same_settings(a: Mapping[str, Any], b: Mapping[str, str]) -> bool:
    def normal(value: Any) -> str:
        with contextlib.suppress(UserError):
            return str(parse_size(str(value)))
        return str(value).upper()
    return {k: normal(v) for k, v in a.items()} == {k: normal(v) for k, v in b.items()}


def _claim(recommended: Mapping[str, Any]) -> Claim | None:
    gain, interval = recommended.get("gain"), recommended.get("ci95")
    if gain is None or not interval:
        return None
    return Claim(1 + float(gain), 1 + float(interval[0]), 1 + float(interval[1]),
                 float(recommended.get("confidence") or 0.95), str(recommended.get("said") or ""))


# --- what can be verified live ----------------------------------------------------------------


def live_and_not(cur: Any, catalog: Catalog,
                 settings: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The settings a SET GLOBAL verifies on a running pool, normalised as the server takes
    them, and the others with why not."""
    live: dict[str, str] = {}
    not_live: dict[str, str] = {}
    for name, value in settings.items():
        knob = catalog.knobs.get(name)
        if knob is None:
            not_live[name] = "the server has no such setting"
        elif not knob.dynamic:
            not_live[name] = "only a restart applies it"
        elif knob.scope.upper() == "SESSION":
            not_live[name] = ("it has a session value: SET GLOBAL reaches only connections "
                              "opened after it, not the application's pool")
        else:
            try:
                live[name] = knob.normalize(value)
            except UserError as exc:
                not_live[name] = f"not a value it takes ({exc})"
                continue
            try:
                # the catalog's own name: never the recommendation's text
                cur.execute(f"SET GLOBAL {knob.name} = @@GLOBAL.{knob.name}")
            except pymysql.MySQLError as exc:
                del live[name]
                not_live[name] = refusal(exc)
    return live, not_live


# --- the windows ------------------------------------------------------------------------------


@dataclass
class Window:
    side: int
    pair: int
    began: float  # seconds since the verify began
    samples: list[tuple[float, dict[str, str]]] = field(default_factory=list)
    # statements knoblab ran between the first and the last reading, where the readings do
    # not count them themselves (RAN)
    own: int = 0
    cpu: float | None = None  # the server's CPU seconds in the window, where it is local
    # performance_schema's statements by digest over the window, where it is on:
    # (schema, digest) -> (text, statements, picoseconds)
    digests: dict[tuple[str, str], tuple[str, int, int]] | None = None

    def figures(self) -> dict[str, float | None]:
        (t0, first), (t1, last) = self.samples[0], self.samples[-1]
        seconds = max(t1 - t0, 1e-9)

        def delta(*names: str) -> float:
            return sum(_number(last, n) - _number(first, n) for n in names)
        own = _number(last, RAN) - _number(first, RAN) if RAN in first and RAN in last \
            else self.own
        statements = max(delta("Questions") - own, 0.0)
        running = sum(_number(s, RUNNING) if RUNNING in s else
                      max(_number(s, "Threads_running") - 1, 0.0)
                      for _, s in self.samples[1:]) / max(len(self.samples) - 1, 1)
        rate = statements / seconds
        per = (lambda x: x / statements) if statements else (lambda x: math.nan)
        return {
            "seconds": seconds, "statements_per_s": rate,
            "latency_ms": 1000 * running / rate if rate else math.inf,
            "threads_running": running,
            # the application's connections (knoblab's two, the reader and the lock, out)
            "connections": sum(_number(s, "Threads_connected") for _, s in self.samples)
            / len(self.samples) - 2,
            "transactions_per_s": delta("Com_commit", "Com_rollback") / seconds,
            "pool_reads_per_statement": per(delta("Innodb_buffer_pool_reads")),
            "rows_read_per_statement": per(delta(*ROWS_READ)),
            "tmp_disk_tables_per_s": delta("Created_tmp_disk_tables") / seconds,
            "errors_per_s": delta(*ERROR_COUNTERS) / seconds,
            "cpu_ms_per_statement": None if self.cpu is None or not statements
            else 1000 * self.cpu / statements,
            "digest_latency_ms": _digest_latency(self.digests)}


def _digest_latency(digests: Mapping[Any, tuple[str, int, int]] | None) -> float | None:
    """The statements' mean latency as performance_schema timed them, in ms."""
    if not digests:
        return None
    count = sum(n for _, n, _ in digests.values())
    return sum(ps for _, _, ps in digests.values()) / count / 1e9 if count else None


def _number(status: Mapping[str, str], name: str) -> float:
    try:
        return float(status.get(name) or 0)
    except ValueError:
        return 0.0


class Reader:
    """Reads the server's counters on one connection of its own, and counts the statements
    it runs (they are in `Questions`)."""

    def __init__(self, server: ExternalServer) -> None:
        self.conn = server.connect()
        self.ran = 0
        with self.conn.cursor() as cur:
            own_session(cur)
        self.process: psutil.Process | None = None
        pid = server.pid
        if pid is not None:
            with contextlib.suppress(psutil.Error):
                self.process = psutil.Process(pid)
        self.by_digest = self._digests_readable()

    def _digests_readable(self) -> bool:
        """performance_schema is on, and this account may read its digest table."""
        try:
            with self.conn.cursor() as cur:
                cur.execute("SELECT @@GLOBAL.performance_schema")
                self.ran += 1
                if not int(one(cur)[0] or 0):
                    return False
            self.digests()
            return True
        except pymysql.MySQLError:
            return False

    def digests(self) -> dict[tuple[str, str], tuple[str, int, int]]:
        """performance_schema's statements by digest now, knoblab's own readings left out:
        (schema, digest) -> (text, statements, picoseconds)."""
        with self.conn.cursor() as cur:
            cur.execute("SELECT SCHEMA_NAME, DIGEST, DIGEST_TEXT, COUNT_STAR, SUM_TIMER_WAIT "
                        "FROM performance_schema.events_statements_summary_by_digest "
                        "WHERE DIGEST IS NOT NULL")
            self.ran += 1
            return {(str(schema or ""), str(digest)): (str(text or ""), int(count or 0),
                                                       int(wait or 0))
                    for schema, digest, text, count, wait in cur.fetchall()
                    if not str(text or "").startswith(OWN_DIGESTS)}

    def status(self) -> dict[str, str]:
        marks = ", ".join(["%s"] * len(COUNTERS))
        with self.conn.cursor() as cur:
            cur.execute(f"SHOW GLOBAL STATUS WHERE Variable_name IN ({marks})", COUNTERS)
            self.ran += 1
            return {str(name): str(value) for name, value in cur.fetchall()}

    def running_until(self, until: float, clock: Callable[[], float]) -> float | None:
        """Threads_running read every RUNNING_EVERY seconds until `until` (knoblab's own
        reading taken out of each): their mean, or None when none was read."""
        seen = []
        with self.conn.cursor() as cur:
            while clock() < until:
                cur.execute("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS "
                            "WHERE VARIABLE_NAME = 'THREADS_RUNNING'")
                self.ran += 1
                seen.append(max(float(one(cur)[0]) - 1, 0.0))
                time.sleep(max(0.0, min(RUNNING_EVERY, until - clock())))
        return sum(seen) / len(seen) if seen else None

    def cpu(self) -> float | None:
        if self.process is None:
            return None
        try:
            times = self.process.cpu_times()
        except psutil.Error:
            return None
        return float(times.user + times.system)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()


def measure(reader: Reader, window: Window, seconds: float, clock: Callable[[], float],
            check: Callable[[Window], None] | None = None) -> Window:
    """Fill `window` with a reading every SAMPLE seconds for `seconds`; `check` sees it after
    each reading (the guard)."""
    cpu0 = reader.cpu()
    before = reader.digests() if reader.by_digest else None
    first = reader.status()
    first[RAN] = str(reader.ran)
    window.samples.append((clock(), first))
    end = window.samples[0][0] + seconds
    while (now := clock()) < end:
        running = reader.running_until(min(now + SAMPLE, end), clock)
        status = reader.status()
        status[RAN] = str(reader.ran)
        if running is not None:
            status[RUNNING] = str(running)
        window.samples.append((clock(), status))
        if check is not None:
            check(window)
    cpu1 = reader.cpu()
    window.cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
    if before is not None:
        window.digests = _digest_change(before, reader.digests())
    return window


def _digest_change(before: Mapping[tuple[str, str], tuple[str, int, int]],
                   after: Mapping[tuple[str, str], tuple[str, int, int]]
                   ) -> dict[tuple[str, str], tuple[str, int, int]]:
    """What each digest ran between two readings (a digest new since the first counts from
    zero; one the table dropped to make room, not at all)."""
    found = {}
    for key, (text, count, wait) in after.items():
        _, count0, wait0 = before.get(key, (text, 0, 0))
        if count > count0 and wait >= wait0:
            found[key] = (text, count - count0, wait - wait0)
    return found


class Watch:
    """The guard at work: B's last GUARD_SPAN seconds against A's figures. A's own are the
    larger of its mean and the 90th percentile of its own GUARD_SPAN stretches, watched as A
    runs: a bound relative to A is one A itself does not cross by its noise. And B's window so
    far, once SUSTAINED long, against A's mean latency: B's stretches may stay under a bound
    that A's spikes raised while B's mean is far past it."""

    JUDGED = ("latency_ms", "threads_running", "errors_per_s")

    def __init__(self, guard: Guard, reference: Mapping[str, float | None] | None = None
                 ) -> None:
        self.guard = guard
        self.mean: dict[str, float | None] = dict(reference or {})
        self.seen: dict[str, list[float]] = {key: [] for key in self.JUDGED}

    def update(self, figures: Mapping[str, float | None]) -> None:
        self.mean = dict(figures)

    @property
    def reference(self) -> dict[str, float]:
        found = {}
        for key in self.JUDGED:
            values = sorted(self.seen[key])
            usual = values[int(0.9 * (len(values) - 1))] if len(values) >= 5 else 0.0
            found[key] = max(float(self.mean.get(key) or 0.0), usual)
        return found

    def _sustained(self, window: Window) -> str | None:
        """B's window so far past the latency bound on A's mean, once SUSTAINED long."""
        (t0, _), (t1, _) = window.samples[0], window.samples[-1]
        mean = float(self.mean.get("latency_ms") or 0.0)
        if t1 - t0 < SUSTAINED or not 0 < mean < math.inf:
            return None
        whole = window.figures()["latency_ms"]
        if whole is None or not math.isfinite(whole) or whole <= self.guard.latency * mean:
            return None  # a window in which nothing finished is the stretches' to judge
        return (f"mean statement latency {_ms(whole)} over B's last {t1 - t0:.0f} s, past "
                f"{self.guard.latency:g}× A's mean {_ms(mean)}")

    def __call__(self, window: Window) -> None:
        if len(window.samples) < 2:
            return
        t1 = window.samples[-1][0]
        recent = [s for s in window.samples if s[0] >= t1 - GUARD_SPAN]
        if len(recent) < 2 or recent[-1][0] - recent[0][0] < min(GUARD_SPAN, 2.0) * 0.8:
            return
        part = Window(window.side, window.pair, 0.0, recent, own=len(recent) - 1)
        now = part.figures()
        if window.side == A:
            for key in self.JUDGED:
                value = now[key]
                if value is not None and math.isfinite(value):
                    self.seen[key].append(value)
            return
        ref, g = self.reference, self.guard
        crossed = []
        # With nothing running in the server and nothing finishing there is no latency to
        # judge (an idle load, or one that stopped: `load_gone` says so); a stall is work in it
        # that does not finish. Statements finishing are a latency, however few run at once (a
        # light load on a fast server keeps under one running on the average).
        working = (now["threads_running"] or 0) >= 0.5 or (now["statements_per_s"] or 0) > 0
        if working and (ref.get("latency_ms") or 0) > 0 and \
                (now["latency_ms"] or 0) > g.latency * float(ref["latency_ms"] or 0):
            crossed.append(f"mean statement latency {_ms(now['latency_ms'])} over the last "
                           f"{GUARD_SPAN:g} s, past {g.latency:g}× A's "
                           f"{_ms(ref['latency_ms'])}")
        elif working and (lasting := self._sustained(window)) is not None:
            crossed.append(lasting)
        if (now["threads_running"] or 0) > g.running * float(ref.get("threads_running") or 0) \
                + g.SLACK:
            crossed.append(f"Threads_running {now['threads_running']:.1f}, past "
                           f"{g.running:g}× A's {float(ref.get('threads_running') or 0):.1f} "
                           f"+ {g.SLACK:g}")
        if (now["errors_per_s"] or 0) > float(ref.get("errors_per_s") or 0) + g.errors:
            crossed.append(f"{now['errors_per_s']:.1f} errors a second, past A's "
                           f"{float(ref.get('errors_per_s') or 0):.1f} + {g.errors:g}")
        if crossed:
            raise Tripped("; ".join(crossed), t1, window)


def load_gone(figures: Mapping[str, float | None],
              reference: Mapping[str, float | None]) -> str | None:
    """Why a window cannot be judged as the application's load, or None: the load stopped
    (hardly a statement a second, against the reference's rate), or the application's
    connections closed (fewer than half the reference's)."""
    rate, before = float(figures["statements_per_s"] or 0), \
        float(reference.get("statements_per_s") or 0)
    if rate < max(1.0, 0.05 * before):
        return (f"production's load stopped ({rate:,.1f} statements a second, "
                f"{before:,.0f} before)")
    now, was = float(figures.get("connections") or 0), float(reference.get("connections") or 0)
    if was >= 1 and now < 0.5 * was:
        return (f"the application's connections closed ({was:.0f} open before, {now:.0f} "
                "now): did its statements fail?")
    return None


def _ms(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "unbounded (no statement finished)"
    return f"{value:.2f} ms"


# --- the decision -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    finding: Finding
    ratio: float  # A's latency over B's: 1.3 means B is 1.3× faster
    low: float
    high: float
    confidence: float
    pairs: int
    decided: bool


def decide(ratios: list[float], ceiling: int, statistics: Statistics) -> Decision:
    """The pairs' latency ratios (A over B) judged at the look after the last pair: the
    sequential levels of a sweep (floor FLOOR pairs, at most `ceiling`)."""
    d = [math.log(r) for r in ratios]
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1)) if n > 1 else math.inf
    levels = Levels.sequential(statistics.alpha, min(n, ceiling), FLOOR, max(ceiling, FLOOR)) \
        if n >= FLOOR else Levels.fixed(statistics.alpha)
    margin = math.log1p(statistics.min_effect)
    if sd == 0:
        p = 0.0 if mean != 0 else 1.0
        p_same = 0.0 if abs(mean) < margin else 1.0
        half = 0.0
    else:
        se = sd / math.sqrt(n)
        p = float(2 * StudentT.sf(abs(mean) / se, n - 1))
        p_same = max(float(StudentT.sf((mean + margin) / se, n - 1)),
                     float(StudentT.cdf((mean - margin) / se, n - 1)))
        half = float(StudentT.isf(levels.worse / 2, n - 1)) * se
    finding = Finding.UNSHOWN
    if n >= FLOOR and p < levels.worse and abs(mean) >= margin:
        finding = Finding.HELPS if mean > 0 else Finding.HURTS
    elif n >= FLOOR and p_same < levels.same:
        finding = Finding.SAME
    return Decision(finding, math.exp(mean), math.exp(mean - half), math.exp(mean + half),
                    1 - levels.worse, n, finding != Finding.UNSHOWN)


def against_claim(decision: Decision, claim: Claim | None) -> str | None:
    """Production's finding set beside the sandbox's claim: held, smaller or larger than
    claimed, not shown, contradicted (None without a claim). Held means the two intervals
    overlap: each is a measurement of the same effect on a different machine and load."""
    if claim is None:
        return None
    if decision.finding == Finding.HURTS:
        return "contradicted"
    if decision.finding != Finding.HELPS:
        return "not shown"
    if decision.high < claim.low:
        return "smaller than claimed"
    return "larger than claimed" if decision.low > claim.high else "held"


# --- the verify -------------------------------------------------------------------------------


def verify(request: Request, store: Any, view: VerifyView) -> dict[str, Any]:
    """The whole verify, and its answer (what verify.json holds) once every setting is back:
    decided, out of time, or stopped by the guard. Stored with its run as it ends."""
    from knoblab.capturing import read_endpoint

    name, endpoint, spec_text = read_endpoint(request.spec, "verify")
    statistics = _statistics(spec_text, request.spec)
    recommendation = read_recommendation(request.source, store)
    pair_seconds = 2 * request.window + request.settle
    ceiling = int(request.seconds // pair_seconds)
    if ceiling < FLOOR:
        need = FLOOR * pair_seconds + request.settle
        raise UserError(f"--for {format_duration(request.seconds)} cannot hold the {FLOOR} "
                        f"pairs of windows a first look needs ({format_duration(request.window)}"
                        f" windows, {format_duration(request.settle)} to settle after each "
                        f"switch): give --for {math.ceil(need / 60)}m or a shorter --window")
    server = ExternalServer(endpoint)
    version_line, _, _ = server.probe()
    where = endpoint.describe()
    lock = hold_lock(server, "verify")
    try:
        with lock.cursor() as cur:
            cur.execute("SELECT CONNECTION_ID()")
            lock_id = int(one(cur)[0])
        return _verify(request, store, view, (name, spec_text, version_line), server,
                       recommendation, statistics, ceiling, lock_id, where)
    finally:
        with contextlib.suppress(Exception):
            lock.close()


def _verify(request: Request, store: Any, view: VerifyView, spec: tuple[str, str, str],
            server: ExternalServer, recommendation: Recommendation, statistics: Statistics,
            ceiling: int, lock_id: int, where: str) -> dict[str, Any]:
    name, spec_text, version_line = spec
    catalog = server.catalog()
    live, not_live, originals = _announced(request, store, view, server, catalog,
                                           recommendation, ceiling, where)
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    first = rng.choice([A, B])
    order = [(pair, side) for pair in range(ceiling)
             for side in ((first, 1 - first) if pair % 2 == 0 else (1 - first, first))]
    run_id = store.create_run(
        name=f"{name}-verify", experiment=Experiment.VERIFY, spec_source=spec_text,
        server_binary=where, server_version=catalog.server_version,
        info=RunInfo(knobs=list(live), defaults=dict(originals), workload={},
                     owner={"pid": os.getpid(), "host": socket.gethostname(),
                            "lock": lock_id},
                     spec_dir=str(request.spec.parent.resolve()), knoblab_version=__version__),
        point_list=[({k: str(originals.get(k)) for k in live}, {}), (dict(live), {})])
    settings = Settings(server, catalog, store, run_id, list(live))
    result: dict[str, Any] = {
        "run": run_id, "server": where, "version": version_line, "from": recommendation.origin,
        "verified": live, "not_verified": not_live,
        "production": {k: originals.get(k) for k in live},
        "claim": None if recommendation.claim is None else asdict(recommendation.claim),
        "deciding": "latency_ms", "window_seconds": request.window,
        "settle_seconds": request.settle, "guard": asdict(request.guard),
        "alpha": statistics.alpha, "min_effect": statistics.min_effect, "windows": [],
        "digests": None}
    began = time.monotonic()
    result["started_at"] = time.time()  # the windows' "began" are seconds since then

    def clock() -> float:
        return time.monotonic() - began

    reader = Reader(server)
    view.message("performance_schema times the statements too: their latency by digest is "
                 "shown beside Little's law's" if reader.by_digest else
                 "performance_schema is off, or this account may not read it: the latency "
                 "is Little's law's alone, no statement's own")
    windows = _Windows(request, store, run_id, server, settings, reader, Watch(request.guard),
                       view, live, originals, result, clock, view.progress(request.seconds))
    put_back: PutBack | None = None
    tripped: dict[str, Any] | None = None
    try:
        try:
            windows.measure_reference(where)
            stopped = windows.measured(order, ceiling, statistics)
        except Tripped as trip:
            stopped = VerifyStop.GUARD
            tripped = windows.tripped(trip)
        finally:
            reader.close()
            with shielded():
                put_back = settings.restore()
    except BaseException as exc:
        with contextlib.suppress(Exception):
            store.set_status(run_id, RunStatus.INTERRUPTED if isinstance(exc, KeyboardInterrupt)
                             else RunStatus.FAILED, str(exc)[:500] or type(exc).__name__)
        raise
    result.update(stopped=stopped, guard_tripped=tripped, put_back=put_back.said())
    result.update(_answer(result, windows.decision, recommendation.claim))
    result["elapsed_seconds"] = round(clock(), 1)
    store.update_info(run_id, verify=result)
    store.set_status(run_id, RunStatus.DONE)
    return result


@dataclass
class _Windows:
    """A verify's windows, A's and B's in pairs, and what they have shown so far: the
    reference production gave before anything changed, each pair's figures, the statements'
    digests, the latest decision; every window stored as it ends, and kept in `result`."""

    request: Request
    store: Any
    run_id: str
    server: ExternalServer
    settings: Settings
    reader: Reader
    watch: Watch
    view: VerifyView
    live: dict[str, str]
    originals: dict[str, str]
    result: dict[str, Any]
    clock: Callable[[], float]
    update: Callable[[float, str], None]
    in_force: int = A
    reference: dict[str, Any] = field(default_factory=dict)
    by_pair: dict[int, dict[int, dict[str, Any]]] = field(default_factory=dict)
    by_digest: dict[tuple[str, str], list[Any]] = field(default_factory=dict)  # text, A, B
    decision: Decision | None = None

    def measure_reference(self, where: str) -> None:
        """Production as it runs before anything changes, the guard's first reference;
        refused when it runs almost nothing."""
        reference = measure(self.reader, Window(A, -1, 0.0), self.request.settle, self.clock,
                            self.watch).figures()
        if reference["statements_per_s"] is not None and \
                float(reference["statements_per_s"] or 0) < 1:
            raise UserError(f"{where} runs almost nothing now "
                            f"({float(reference['statements_per_s'] or 0):.2f} statements "
                            "a second): verify measures the server under its own load; "
                            "run it while the application runs")
        self.watch.update(reference)
        self.reference = reference
        self.result["reference"] = {k: _finite(v) for k, v in reference.items()}

    def measured(self, order: list[tuple[int, int]], ceiling: int, statistics: Statistics
                 ) -> VerifyStop:
        """The windows in `order` until decided, the time is spent, or the load went."""
        request, result = self.request, self.result
        for position, (pair, side) in enumerate(order):
            if self.clock() + request.window + \
                    (request.settle if side != self.in_force else 0) > request.seconds:
                break
            self.update(self.clock(), f"pair {pair + 1}: {SIDE[side]}")
            if side != self.in_force:
                self._switch(side, pair)
            window = measure(self.reader, Window(side, pair, self.clock()), request.window,
                             self.clock, self.watch)
            figures = window.figures()
            _store_window(self.store, self.run_id, window, position, figures)
            gone = load_gone(figures, self.reference)
            if gone is not None:
                result["load_gone"] = {"said": gone, "side": "AB"[side],
                                       "at": round(window.began, 1)}
                self.view.message(f"{gone}, in a window of {SIDE[side]} at "
                                  f"{window.began:.0f} s: nothing is judged from here on")
                return VerifyStop.LOAD
            self._kept(window, figures, side, pair)
            ratios = [p[A]["latency_ms"] / p[B]["latency_ms"] for p in self.by_pair.values()
                      if A in p and B in p and p[B]["latency_ms"] and p[A]["latency_ms"]
                      and math.isfinite(p[A]["latency_ms"])
                      and math.isfinite(p[B]["latency_ms"])]
            if len(ratios) >= 1 and len(self.by_pair[pair]) == 2:
                self.decision = decide(ratios, ceiling, statistics)
                self.update(self.clock(), f"after {len(ratios)} pairs: B "
                                          f"{self.decision.ratio:.2f}× as fast")
                if self.decision.decided:
                    return VerifyStop.DECIDED
        return VerifyStop.TIME

    def _switch(self, side: int, pair: int) -> None:
        """The other side's values set (B's read back the first time), then left to settle."""
        self.settings.apply(self.live if side == B else {})
        self.in_force = side
        if side == B and "applied" not in self.result:
            self.result["applied"] = _read_back(self.server, self.live, self.originals,
                                                self.view)
        _wait_for_resize(self.reader, self.clock)
        measure(self.reader, Window(side, pair, self.clock()), self.request.settle, self.clock,
                self.watch)

    def _kept(self, window: Window, figures: dict[str, Any], side: int, pair: int) -> None:
        """A judged window's figures kept: in the answer, its digests summed, its pair."""
        self.result["windows"].append({"side": "AB"[side], "pair": pair,
                                       "began": round(window.began, 1),
                                       **{k: _finite(v) for k, v in figures.items()}})
        for key, (text, count, wait) in (window.digests or {}).items():
            sums = self.by_digest.setdefault(key, [text, 0, 0, 0, 0])
            sums[1 + 2 * side] += count
            sums[2 + 2 * side] += wait
        self.result["digests"] = _top_digests(self.by_digest) if self.reader.by_digest else None
        self.by_pair.setdefault(pair, {})[side] = figures
        if side == A:
            self.watch.update(_mean([p[A] for p in self.by_pair.values() if A in p]))

    def tripped(self, trip: Tripped) -> dict[str, Any]:
        """A guard rail crossed: production's values back at once; what B did until then
        stored too; how long B stayed in force after the bound was crossed."""
        with shielded():
            self.settings.apply({})
        in_force_for = self.clock() - trip.crossed_at
        if len(trip.window.samples) >= 2:
            _store_window(self.store, self.run_id, trip.window, len(self.result["windows"]),
                          trip.window.figures())
        self.view.message(f"guard: {trip.said}: B put back; it was in force "
                          f"{in_force_for:.1f} s after the bound was crossed")
        return {"said": trip.said, "seconds_after_crossing": round(in_force_for, 2),
                "crossed_at": round(trip.crossed_at, 2)}


def _announced(request: Request, store: Any, view: VerifyView, server: ExternalServer,
               catalog: Catalog, recommendation: Recommendation, ceiling: int, where: str
               ) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """What is verified live (the recommendation's settings the server changes in place),
    what is not and why, and production's own values of them; said before anything changes.
    Refused while an earlier run's settings are still changed on this server, or when none
    of the recommendation can be verified live."""
    for row in store.pending_restores():
        if server.is_same_as(row["server"]):
            raise UserError(f"run {row['run_id']} left {row['name']} changed on {where}; put "
                            f"it back first with: knoblab restore {row['run_id']}")
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            own_session(cur)
            live, not_live = live_and_not(cur, catalog, recommendation.settings)
    finally:
        conn.close()
    if not live:
        raise UserError(f"nothing of {recommendation.origin} can be verified live on {where}: "
                        + "; ".join(f"{k}: {v}" for k, v in not_live.items()))
    for setting, why in not_live.items():
        view.message(f"not verified live: {setting} = {recommendation.settings[setting]} "
                     f"({why})")
    originals = server.global_values(list(live))
    shown_b = ", ".join(f"{k} = {_shown(k, v)}" for k, v in live.items())
    shown_a = ", ".join(f"{k} = {_shown(k, originals.get(k))}" for k in live)
    view.message(f"verifying on {where} ({catalog.server_version}) under its own load: "
                 f"A = production's own ({shown_a}) against B = the recommendation "
                 f"({shown_b}), from {recommendation.origin}")
    view.message(f"windows of {format_duration(request.window)} in pairs (A and B, each pair "
                 f"the other way round), {format_duration(request.settle)} left out after "
                 f"each switch; at most {ceiling} pairs in {format_duration(request.seconds)}, "
                 f"a look after each from the {FLOOR}rd; every setting is put back at the end")
    view.message(request.guard.said())
    pool = "innodb_buffer_pool_size"
    if pool in live and originals.get(pool) and int(live[pool]) > int(originals[pool] or 0):
        # Seen here (MariaDB 10.11.19, sysbench oltp_read_write): the first shrink back failed
        # the application's statements with error 1206 and its connections closed.
        view.message(f"warning: each switch back to production's {pool} shrinks the buffer "
                     "pool online, and under a writing load MariaDB 10.11 can fail statements "
                     "while it shrinks (error 1206, the lock table is short of memory): if "
                     "the application's connections close, verify stops and says so")
    return live, not_live, originals


def _top_digests(by_digest: Mapping[tuple[str, str], list[Any]]) -> list[dict[str, Any]]:
    """The digests run most over the judged windows, each side's mean latency (ms)."""
    rows = sorted(by_digest.items(), key=lambda item: -(item[1][1] + item[1][3]))[:DIGESTS]
    return [{"schema": schema, "digest": digest, "text": text,
             "statements": {"a": count_a, "b": count_b},
             "latency_ms": {"a": wait_a / count_a / 1e9 if count_a else None,
                            "b": wait_b / count_b / 1e9 if count_b else None}}
            for (schema, digest), (text, count_a, wait_a, count_b, wait_b) in rows]


def _read_back(server: ExternalServer, live: Mapping[str, str],
               originals: Mapping[str, str | None], view: VerifyView) -> dict[str, str]:
    """What the server applied of B (it may round a size, or cap it): said where it is not
    what was asked."""
    applied = server.global_values(list(live))
    kept = [name for name, asked in live.items() if applied.get(name) is not None
            and not _same_value(applied[name], asked)
            and _same_value(applied[name], originals.get(name) or "")]
    if len(kept) == len(live):
        raise UserError(
            f"the server kept its own {', '.join(f'{n} = {_shown(n, applied[n])}' for n in kept)}"
            " (SET GLOBAL did not change it: on MariaDB 10.11.12 and later a buffer pool above "
            "innodb_buffer_pool_size_max, a startup setting, is refused): B would be A, "
            "there is nothing to verify live")
    for name, asked in live.items():
        now = applied.get(name)
        if now is not None and not _same_value(now, asked):
            view.message(f"the server applied {name} = {_shown(name, now)}, not "
                         f"{_shown(name, asked)}: B is measured as it applied it")
    return applied


def _same_value(a: str, b: str) -> bool:
    return a == b or a.strip().upper() == b.strip().upper()


def _statistics(spec_text: str, path: Path) -> Statistics:
    """The spec's [statistics] min_effect and alpha (a sweep's defaults where it has none)."""
    raw = tomllib.loads(spec_text).get("statistics") or {}
    if not isinstance(raw, dict):
        raise UserError(f"{path}: [statistics] must be a table, e.g. [statistics] alpha = 0.01")
    defaults = Statistics()
    return Statistics(
        min_effect=section.number(raw, "min_effect", "statistics", defaults.min_effect, float,
                                  0.0, 1.0),
        alpha=section.number(raw, "alpha", "statistics", defaults.alpha, float, 1e-9, 0.5))


def _wait_for_resize(reader: Reader, clock: Callable[[], float]) -> None:
    """A buffer pool resized online finishes in the background on some servers: wait for
    its status to say it is done (it says nothing, or "Completed …")."""
    deadline = clock() + RESIZE_WAIT
    while clock() < deadline:
        status = reader.status().get("Innodb_buffer_pool_resize_status", "")
        if not status or "complete" in status.lower() or "resized" in status.lower():
            return
        time.sleep(SAMPLE)


def _store_window(store: Any, run_id: str, window: Window, position: int,
                  figures: Mapping[str, float | None]) -> None:
    """The window as a trial of its point, with a row per reading: stored as it ends."""
    trial = store.begin_trial(run_id, point_idx=window.side, repetition=max(window.pair, 0),
                              position=position)
    t0 = window.samples[0][0]
    for (ta, a), (tb, b) in zip(window.samples, window.samples[1:], strict=False):
        part = Window(window.side, window.pair, 0.0, [(ta, a), (tb, b)], own=1).figures()
        store.add_second(trial, round(tb - t0, 3), threads=int(part["threads_running"] or 0),
                         qps=part["statements_per_s"],
                         latency_ms=_finite(part["latency_ms"]),
                         errors=part["errors_per_s"])
    details: dict[str, Any] = {k: _finite(v) for k, v in figures.items()}
    if window.digests:
        details["digests"] = [[schema, digest, count, wait] for (schema, digest), (_, count, wait)
                              in sorted(window.digests.items(), key=lambda i: -i[1][1])]
    store.finish_trial(trial, status=TrialState.DONE, value=_finite(figures["latency_ms"]),
                       details=details)


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def _mean(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    keys = rows[0].keys() if rows else ()
    found: dict[str, float | None] = {}
    for key in keys:
        values = [float(r[key]) for r in rows if r[key] is not None and math.isfinite(r[key])]
        found[key] = sum(values) / len(values) if values else None
    return found


def _answer(result: dict[str, Any], decision: Decision | None,
            claim: Claim | None) -> dict[str, Any]:
    """The finding, its figure and interval, the other figures' means, and the sentence."""
    windows = result["windows"]
    figures: dict[str, Any] = {}
    for key in ("latency_ms", "digest_latency_ms", "statements_per_s", "transactions_per_s",
                "threads_running", "pool_reads_per_statement", "rows_read_per_statement",
                "tmp_disk_tables_per_s", "errors_per_s", "cpu_ms_per_statement"):
        a = [w[key] for w in windows if w["side"] == "A" and _finite(w[key]) is not None]
        b = [w[key] for w in windows if w["side"] == "B" and _finite(w[key]) is not None]
        figures[key] = {"a": sum(a) / len(a) if a else None, "b": sum(b) / len(b) if b else None}
    found: dict[str, Any] = {"figures": figures}
    tripped = result.get("guard_tripped")
    if tripped is not None:
        # The guard's bound is a harm far past min_effect, seen as it happened: a finding of
        # its own, whatever the pairs before it showed.
        found.update(finding=Finding.HURTS.value, gain=None if decision is None else
                     decision.ratio - 1, interval=None, confidence=None,
                     pairs=0 if decision is None else decision.pairs,
                     against_claim=None if claim is None else "contradicted")
        found["said"] = (f"the recommendation hurts on production: the guard put production's "
                         f"own values back ({tripped['said']}), "
                         f"{tripped['seconds_after_crossing']:.1f} s after the bound was "
                         "crossed")
        if claim is not None:
            found["said"] += f"; the sandbox claimed {claim.ratio:.2f}×: contradicted"
        return found
    if decision is None:
        found.update(finding=Finding.UNSHOWN.value, gain=None, interval=None, confidence=None,
                     pairs=0, against_claim=None if claim is None else "not shown")
        gone = result.get("load_gone")
        found["said"] = "not shown: " + (
            f"{gone['said']} before a pair of windows was measured" if gone
            else "no pair of windows was measured in the time given")
        return found
    verdict = against_claim(decision, claim)
    gone = result.get("load_gone")
    found.update(finding=decision.finding.value, gain=decision.ratio - 1,
                 interval=[_finite(decision.low - 1), _finite(decision.high - 1)],
                 confidence=decision.confidence, pairs=decision.pairs, against_claim=verdict)
    shown = (f"B's statements {decision.ratio:.2f}× as fast as A's "
             f"[{decision.low:.2f}×, {decision.high:.2f}×] ({decision.confidence:.1%} CI, "
             f"{decision.pairs} pairs)")
    words = {Finding.HELPS: "the recommendation helps on production",
             Finding.HURTS: "the recommendation hurts on production",
             Finding.SAME: f"the same on production (within ±{result['min_effect']:.0%})",
             Finding.UNSHOWN: "not shown either way on production"}[decision.finding]
    said = f"{words}: {shown}"
    if claim is not None:
        said += (f"; the sandbox claimed {claim.ratio:.2f}× [{claim.low:.2f}×, "
                 f"{claim.high:.2f}×]: {verdict}")
    if gone is not None:
        said += (f"; then {gone['said']} in a window of {gone['side']} at {gone['at']:.0f} s: the "
                 "verify ended there")
    found["said"] = said
    return found


def _shown(name: str, value: str | None) -> str:
    if value is None:
        return "the default"
    if name.endswith("_size") and value.isdigit() and int(value) >= 1024:
        return format_size(int(value))
    return value
