"""The sysbench workload: parsers on real sysbench 1.0.20 output, input checks, and real runs
against sandbox servers (no mocks: the sysbench binary and the server are real).
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from knoblab.errors import UserError
from knoblab.seconds import Second
from knoblab.server.binary import ServerBinary
from knoblab.server.sandbox import Sandbox, derived_template
from knoblab.workloads.sysbench import (
    RAND_TYPES,
    SYSBENCH_TESTS,
    SysbenchWorkload,
    histogram_percentile,
    parse_second,
    parse_summary,
)

DATA = Path(__file__).resolve().parent / "data"
# A 5-s oltp_read_write run, 4 threads, 2 x 10,000 rows, --percentile=95 --histogram=on.
CAPTURED_RUN = DATA / "sysbench-1.0.20-run.txt"

WL = SysbenchWorkload(test="oltp_read_write", threads=4, tables=2, table_size=10_000,
                      duration=5, percentile=95)

# --------------------------------------------------------------------------- parsing

LINE = ("[ 1s ] thds: 4 tps: 804.19 qps: 16140.70 (r/w/o: 11308.56/3219.76/1612.37) "
        "lat (ms,95%): 7.56 err/s: 0.00 reconn/s: 0.00")
# Captured from bulk_insert (an "event" is one row; the queries are multi-row INSERTs).
HIGH = ("[ 2s ] thds: 2 tps: 229483.09 qps: 7.00 (r/w/o: 0.00/7.00/0.00) "
        "lat (ms,95%): 0.00 err/s: 0.00 reconn/s: 0.00")
# Captured from 16 threads on a 10-row table: deadlocks, which sysbench ignores and counts.
ERRORS = ("[ 1s ] thds: 16 tps: 596.80 qps: 16846.87 (r/w/o: 12616.47/2729.93/1500.47) "
          "lat (ms,99%): 84.47 err/s: 291.92 reconn/s: 0.00")
# What a stalled server looks like: a second with nothing completed.
ZERO = ("[ 1234s ] thds: 512 tps: 0.00 qps: 0.00 (r/w/o: 0.00/0.00/0.00) "
        "lat (ms,99%): 0.00 err/s: 0.00 reconn/s: 3.00")


def test_parse_second_reads_the_interval_line():
    assert parse_second(LINE) == Second(
        t=1.0, threads=4, tps=804.19, qps=16140.70, reads=11308.56, writes=3219.76,
        other=1612.37, latency_ms=7.56, errors=0.0, reconnects=0.0)
    assert parse_second(LINE + "\n") == parse_second(LINE)


def test_parse_second_high_zero_and_error_values():
    high = parse_second(HIGH)
    assert (high.t, high.threads, high.tps, high.qps, high.writes) == (2.0, 2, 229483.09, 7.0, 7.0)
    errors = parse_second(ERRORS)
    assert (errors.threads, errors.errors, errors.latency_ms) == (16, 291.92, 84.47)
    zero = parse_second(ZERO)
    assert (zero.t, zero.threads, zero.tps, zero.qps, zero.reconnects) == (1234.0, 512, 0, 0, 3.0)


@pytest.mark.parametrize("line", [
    "",
    "Threads started!",
    "[ 1s ] queue length: 0, concurrency: 0",  # the extra line --rate adds every second
    "FATAL: `thread_run' function failed: /usr/share/sysbench/oltp_common.lua:432: SQL error",
    "      61.083 |*                                        1",
    "    transactions:                        2468   (492.52 per sec.)",
    "[ 1s ] thds: 4 tps: 804.19 qps: 16140.70",  # cut short
])
def test_parse_second_ignores_other_lines(line):
    assert parse_second(line) is None


def test_parse_summary_of_a_captured_run():
    text = CAPTURED_RUN.read_text()
    summary = parse_summary(text)
    assert summary is not None
    assert (summary.transactions, summary.tps) == (2468, 492.52)
    assert (summary.queries, summary.qps) == (49360, 9850.30)
    assert (summary.ignored_errors, summary.reconnects) == (0, 0)
    assert (summary.total_time, summary.events) == (5.0054, 2468)
    assert (summary.latency_min_ms, summary.latency_avg_ms, summary.latency_max_ms) == \
        (1.31, 8.10, 60.57)
    assert (summary.percentile, summary.latency_pct_ms) == (95, 16.41)
    # The histogram: 152 non-empty buckets holding every event, in increasing order.
    assert len(summary.histogram) == 152
    assert summary.histogram[0] == (1.319, 1) and summary.histogram[-1] == (61.083, 1)
    assert sum(count for _, count in summary.histogram) == summary.events
    values = [value for value, _ in summary.histogram]
    assert values == sorted(values)
    # sysbench's percentile is one of its buckets, rounded to two decimals.
    assert histogram_percentile(summary.histogram, 95) == 16.408
    seconds = [s for s in map(parse_second, text.splitlines()) if s is not None]
    assert [s.t for s in seconds] == [1, 2, 3, 4, 5]


KILLED_OUTPUT = """\
Threads started!

[ 1s ] thds: 4 tps: 506.56 qps: 10162.09 (r/w/o: 7118.75/2026.24/1017.11) lat (ms,95%): 13.22 \
err/s: 0.00 reconn/s: 0.00
FATAL: mysql_stmt_execute() returned error 2013 (Lost connection to server during query) for \
query 'COMMIT'
FATAL: `thread_run' function failed: /usr/share/sysbench/oltp_common.lua:409: SQL error, \
errno = 2013, state = 'HY000': Lost connection to server during query
"""

NO_PERCENTILE_NO_HISTOGRAM = """\
SQL statistics:
    queries performed:
        read:                            47552
        write:                           0
        other:                           0
        total:                           47552
    transactions:                        47552  (23685.86 per sec.)
    queries:                             47552  (23685.86 per sec.)
    ignored errors:                      0      (0.00 per sec.)
    reconnects:                          0      (0.00 per sec.)

General statistics:
    total time:                          2.0056s
    total number of events:              47552

Latency (ms):
         min:                                    0.03
         avg:                                    0.08
         max:                                    5.56
         percentile stats:               disabled
         sum:                                 3992.85
"""


def test_parse_summary_missing_or_partial():
    assert parse_summary(KILLED_OUTPUT) is None
    assert parse_summary("") is None
    cut = CAPTURED_RUN.read_text().split("General statistics:")[0]
    assert parse_summary(cut) is None  # a report cut short is no report
    summary = parse_summary(NO_PERCENTILE_NO_HISTOGRAM)
    assert summary.transactions == 47552 and summary.histogram == ()
    assert summary.percentile == 0 and math.isnan(summary.latency_pct_ms)


def test_histogram_percentile():
    histogram = ((1.0, 50), (2.0, 30), (3.0, 15), (4.0, 5))
    assert histogram_percentile(histogram, 50) == 1.0  # exactly 50 of 100 at 1.0
    assert histogram_percentile(histogram, 50.5) == 2.0
    assert histogram_percentile(histogram, 80) == 2.0
    assert histogram_percentile(histogram, 95) == 3.0
    assert histogram_percentile(histogram, 95.01) == 4.0
    assert histogram_percentile(histogram, 100) == 4.0
    assert histogram_percentile(histogram, 0.001) == 1.0
    assert histogram_percentile(reversed(histogram), 80) == 2.0  # order does not matter
    assert math.isnan(histogram_percentile((), 99))
    for q in (0, -1, 100.5):
        with pytest.raises(ValueError):
            histogram_percentile(histogram, q)


# --------------------------------------------------------------------------- sysbench itself


def test_known_tests_and_distributions_match_the_installed_sysbench():
    scripts = {p.stem for p in Path("/usr/share/sysbench").glob("*.lua")} - {"oltp_common"}
    assert set(SYSBENCH_TESTS) == scripts
    help_text = subprocess.run(["sysbench", "--help"], capture_output=True, text=True).stdout
    listed = help_text.split("--rand-type=STRING")[1].split("{")[1].split("}")[0]
    assert tuple(listed.split(",")) == RAND_TYPES


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(("workload", "expected"), [
    (SysbenchWorkload(test="oltp_read_wirte"), "did you mean 'oltp_read_write'"),
    (SysbenchWorkload(test="tpcc"), "use one of oltp_read_write, "),
    (SysbenchWorkload(options=(("point_select", "3"),)), "did you mean point_selects"),
    (SysbenchWorkload(options=(("no_such_thing", "1"),)), "has no option 'no_such_thing'"),
    (SysbenchWorkload(options=(("table-size", "10"),)), "use the workload's table_size"),
    (SysbenchWorkload(options=(("--time", "10"),)), "use the workload's duration"),
    (SysbenchWorkload(options=(("mysql_socket", "/tmp/x"),)), "set by knoblab itself"),
    (SysbenchWorkload(options=(("report-interval", "10"),)), "set by knoblab itself"),
    (SysbenchWorkload(rand_type="zipfian"), "use one of uniform, gaussian, special, pareto"),
    (SysbenchWorkload(threads=0), "threads = 0"),
    (SysbenchWorkload(tables=0), "tables = 0"),
    (SysbenchWorkload(table_size=0), "table_size = 0"),
    (SysbenchWorkload(duration=0), "duration = 0"),
    (SysbenchWorkload(percentile=0), "percentile = 0"),
    (SysbenchWorkload(test="select_random_points", tables=2), "set tables = 1"),
    (SysbenchWorkload(options=(("skip_trx", "on"), ("skip-trx", "off"))), "given twice"),
    (SysbenchWorkload(binary="/nonexistent/sysbench"), "apt-get install sysbench"),
])
def test_bad_input_is_one_line_user_error_before_anything_runs(workload, expected):
    with pytest.raises(UserError) as caught:
        workload.validate()
    assert expected in str(caught.value)
    assert "\n" not in str(caught.value)
    with pytest.raises(UserError):  # run() checks first: the "server" is never touched
        workload.run(None, lambda second: None)


def test_options_knoblab_does_not_set_are_accepted():
    SysbenchWorkload(options=(("point_selects", "5"), ("skip-trx", "on"),
                              ("mysql-ignore-errors", "all"))).validate()
    SysbenchWorkload(options={"--range_selects": False}).validate()
    SysbenchWorkload(test="bulk_insert").validate()
    SysbenchWorkload(test="select_random_ranges", tables=1,
                     options=(("number_of_ranges", "5"),)).validate()


def test_sysbench_missing_from_path(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError, match="not on PATH: install it: apt-get install sysbench"):
        SysbenchWorkload().validate()


# --------------------------------------------------------------------------- prepared statements


def test_too_many_prepared_statements_switch_to_client_side():
    big = SysbenchWorkload(threads=200, tables=10)
    assert big.prepared_statements() == 200 * (9 * 10 + 2)
    assert "--db-ps-mode=disable" in big.command_options()
    small = SysbenchWorkload(threads=8, tables=4)
    assert "--db-ps-mode=disable" not in small.command_options()
    # The limit is the server's (run() reads it), and a thread override counts.
    assert "--db-ps-mode=disable" in small.command_options(max_prepared_stmt_count=100)
    assert "--db-ps-mode=disable" in small.command_options(threads=500)  # 500 x 38
    # oltp_insert prepares nothing; the user's own choice is kept as it is.
    assert SysbenchWorkload(test="oltp_insert", threads=200, tables=10).prepared_statements() == 0
    chosen = SysbenchWorkload(threads=200, tables=10, options=(("db-ps-mode", "disable"),))
    assert chosen.command_options().count("--db-ps-mode=disable") == 1
    forced = SysbenchWorkload(threads=200, tables=10, options=(("db_ps_mode", "auto"),))
    assert "--db-ps-mode=disable" not in forced.command_options()
    with pytest.raises(UserError, match="max_prepared_stmt_count"):
        forced.validate()


def test_prepare_key_depends_only_on_the_prepared_data():
    key = WL.prepare_key()
    assert key == replace(WL, threads=64, duration=300, rand_type="pareto", percentile=99,
                          test="oltp_point_select", options=(("point_selects", "3"),)
                          ).prepare_key()
    assert key != replace(WL, tables=3).prepare_key()
    assert key != replace(WL, table_size=10_001).prepare_key()
    assert key != replace(WL, options=(("mysql_storage_engine", "MyISAM"),)).prepare_key()
    assert replace(WL, options=(("mysql_storage_engine", "MyISAM"),)).prepare_key() == \
        replace(WL, options=(("mysql-storage-engine", "myisam"),)).prepare_key()
    assert key != replace(WL, options=(("create_secondary", "off"),)).prepare_key()


# --------------------------------------------------------------------------- real runs

@pytest.fixture(scope="module")
def sysbench_template(binary: ServerBinary, knoblab_home: Path) -> Path:
    return derived_template(binary, WL.prepare_key(), WL.prepare, knoblab_home)


@pytest.fixture
def sysbench_server(binary, knoblab_home, sysbench_template):
    with Sandbox(binary, sysbench_template, {}, home=knoblab_home) as server:
        yield server


def _sysbench_processes(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "sysbench" in cmdline and marker in cmdline:
                found.append(int(entry.name))
    return found


@pytest.mark.server
def test_run_streams_seconds_that_agree_with_the_summary(sysbench_server):
    conn = sysbench_server.connect(WL.database)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM sbtest1")
            assert cur.fetchone() == (10_000,)
            cur.execute("SHOW TABLES")
            assert {row[0] for row in cur.fetchall()} == {"sbtest1", "sbtest2"}
    finally:
        conn.close()

    seen: list[Second] = []
    arrivals: list[float] = []
    # The server's count of COMMITs (one per sysbench transaction) as each second arrives:
    # what the run had done by then, measured on the server, whatever the rate did.
    counter = sysbench_server.connect()
    committed: list[int] = []

    def commits() -> int:
        with counter.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS LIKE 'Com_commit'")
            return int(cur.fetchone()[1])

    def on_second(second: Second) -> None:
        arrivals.append(time.monotonic())
        seen.append(second)
        committed.append(commits())

    try:
        before = commits()
        result = WL.run(sysbench_server, on_second)
        finished = time.monotonic()
    finally:
        counter.close()
    assert result.error is None, result.error
    assert result.exit_code == 0
    assert 4 <= len(seen) <= 6
    assert seen == result.seconds
    assert all(b.t > a.t for a, b in zip(seen, seen[1:], strict=False))
    # thds is the threads running: in the last report some may already have finished
    assert all(s.threads == 4 for s in seen[:-1]) and 1 <= seen[-1].threads <= 4, seen
    # A second can stall to 0 on a busy machine (stalls are what knoblab reports); most cannot.
    assert sum(s.tps > 0 for s in seen) >= len(seen) - 1
    # Streaming: each second arrived as sysbench printed it, not all at the end.
    # Streaming, not all at once at the end: the lines arrive about a second apart (a loaded
    # machine may delay the first one a little, hence not a full 3 s).
    assert arrivals[-1] - arrivals[0] >= 2.5
    assert finished - arrivals[0] >= 2.5
    assert "--rand-type=uniform" in result.command and "--percentile=95" in result.command

    summary = result.summary
    assert summary is not None and summary.percentile == 95
    assert summary.events == summary.transactions
    # Each interval line is (events in that interval) / (its length, ~1 s), so the sum of the
    # per-second tps counts the transactions finished in [0, last t]. sysbench's total counts
    # up to total_time: a few ms more when the last report is printed at --time, a whole second
    # more when the workers ended before its reporter woke for that report (a loaded machine).
    # Then compare with what the server had committed when the last reported second arrived:
    # the run's rate is not even (a second at 400 tps beside one at 1300), so the total
    # pro-rated to the seconds reported is not what they hold.
    reported = sum(s.tps for s in seen)
    if summary.total_time - seen[-1].t < 0.5:  # the usual case: the last report was printed
        assert reported == pytest.approx(summary.transactions, rel=0.01)
    else:  # the last second went unreported: the series holds the rest, and no more
        by_last_report = committed[-1] - before  # counted a moment after it was printed
        assert by_last_report * 0.97 <= reported <= min(by_last_report * 1.01,
                                                        summary.transactions)
    # The histogram holds every event, and its 95th percentile is sysbench's own: equal up to
    # one bucket (sysbench rounds the rank half up, buckets are 1.8% apart) and the rounding
    # to two decimals of its report.
    assert sum(count for _, count in summary.histogram) == summary.events
    ours = histogram_percentile(summary.histogram, 95)
    assert abs(ours - summary.latency_pct_ms) <= 0.019 * summary.latency_pct_ms + 0.006


@pytest.mark.server
def test_server_killed_mid_run_keeps_the_partial_series(binary, knoblab_home, sysbench_template):
    long_run = replace(WL, duration=20)
    killed: list[float] = []
    with Sandbox(binary, sysbench_template, {}, home=knoblab_home) as server:

        def on_second(second: Second) -> None:
            if second.t >= 3 and not killed:
                os.kill(server.pid, signal.SIGKILL)
                killed.append(time.monotonic())

        result = long_run.run(server, on_second)
        returned = time.monotonic()
    assert killed, "sysbench never reached its third second"
    assert returned - killed[0] < 10, "run() did not return promptly after the server died"
    assert len(result.seconds) >= 2
    assert result.summary is None
    assert result.exit_code != 0
    assert result.error is not None and "FATAL" in result.error
    assert "Lost connection" in result.error or "2013" in result.error


@pytest.mark.server
def test_ctrl_c_kills_sysbench_and_timeout_returns_an_error(sysbench_server):
    marker = str(sysbench_server.socket)
    long_run = replace(WL, duration=30)

    def interrupt(second: Second) -> None:
        raise KeyboardInterrupt

    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        long_run.run(sysbench_server, interrupt)
    assert time.monotonic() - began < 10
    assert _sysbench_processes(marker) == []

    seen: list[Second] = []
    began = time.monotonic()
    result = long_run.run(sysbench_server, seen.append, timeout=2.5)
    assert time.monotonic() - began < 8
    assert result.error.startswith("sysbench did not finish within 2.5 s")
    assert result.exit_code == -signal.SIGKILL
    assert result.summary is None
    assert 1 <= len(result.seconds) <= 3 and result.seconds == seen
    assert _sysbench_processes(marker) == []


@pytest.mark.server
def test_server_limit_on_prepared_statements_is_respected(binary, knoblab_home,
                                                          sysbench_template):
    # 4 threads x (9 x 2 + 2) = 80 statements: more than this server allows, so the run must
    # switch to client-side statements (otherwise sysbench dies with error 1461 at start-up).
    short = replace(WL, duration=2)
    settings = {"max_prepared_stmt_count": "50"}
    with Sandbox(binary, sysbench_template, settings, home=knoblab_home) as server:
        result = short.run(server, lambda second: None, threads=4)
    assert result.error is None, result.error
    assert "--db-ps-mode=disable" in result.command
    assert result.summary.transactions > 0


# --------------------------------------------------------------------------- the interval


def _two_starts(levels: list[float]) -> dict:
    """series_evidence over one point measured on len(levels) starts, 40 steady seconds each."""
    from knoblab.store import Trial, TrialState
    from knoblab.workloads.sysbench import series_evidence

    trials, seconds = [], {}
    for i, level in enumerate(levels):
        rows = [{"t": float(s + 1), "tps": level + (3.0 if s % 2 else -3.0) if level else 0.0}
                for s in range(40)]
        seconds[i] = rows
        trials.append(Trial(i, 0, i, i, TrialState.DONE, level, {},
                            {"steady": {"start": 0, "end": 40}}, None))
    return series_evidence(trials, seconds, {}, {"confidence": 0.95})


def test_interval_of_two_starts_respects_positivity():
    # The 256M point of a buffer pool sweep: starts at 1,811 and 2,172 tps. A symmetric
    # t-interval with 1 degree of freedom is 0.00–4,285 after clipping at zero: nonsense.
    found = _two_starts([1811.0, 2172.0])
    low, high = found["ci95"]
    assert found["mean"] == pytest.approx(1991.5)
    assert 0.0 < low < found["mean"] < high
    # On the log scale: exp(mean(log) ± t(0.975, 1) · s_log / √2).
    logs = [math.log(1811.0), math.log(2172.0)]
    half = 12.7062047 * abs(logs[1] - logs[0]) / math.sqrt(2) / math.sqrt(2)
    centre = sum(logs) / 2
    assert low == pytest.approx(math.exp(centre - half), rel=1e-6)
    assert high == pytest.approx(math.exp(centre + half), rel=1e-6)
    # Three close starts: a narrow interval around the mean.
    low, high = _two_starts([1000.0, 1010.0, 990.0])["ci95"]
    assert 940 < low < 1000 < high < 1065


def test_interval_with_a_start_at_zero_stays_on_tps():
    # A start that stalled throughout has no logarithm: the interval is on tps, and its lower
    # bound 0 is what was observed.
    low, high = _two_starts([0.0, 800.0])["ci95"]
    assert low == 0.0 and high > 800.0
