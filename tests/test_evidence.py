"""Unit tests for knoblab.evidence, on hand-made status snapshots and a synthetic study."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knoblab.evidence import (
    DEFAULT_IGNORE,
    CounterEvidence,
    describe,
    explaining_counters,
    is_cost,
    status_delta,
)
from knoblab.evidence import kind_of as evidence_kind
from knoblab.units import format_size

# --------------------------------------------------------------------------- status_delta


def test_status_delta_numeric_float_text_and_lower_case():
    before = {"Created_tmp_disk_tables": "3", "Innodb_data_written": "1000", "Cost": "0.5"}
    after = {"Created_tmp_disk_tables": "5", "Innodb_data_written": "1800", "Cost": "2.25"}
    assert status_delta(before, after) == {
        "created_tmp_disk_tables": 2.0,
        "innodb_data_written": 800.0,
        "cost": 1.75,
    }


def test_status_delta_skips_text_and_missing_names():
    before = {"Ssl_cipher": "", "Innodb_buffer_pool_dump_status": "OFF", "Only_before": "1",
              "Slave_running": "OFF", "Version_like": "10.11.6", "Threads_running": "4"}
    after = {"Ssl_cipher": "AES", "Innodb_buffer_pool_dump_status": "ON", "Only_after": "7",
             "Slave_running": "2", "Version_like": "10.11.7", "Threads_running": "2"}
    # A gauge is kept as after - before (may be negative); everything else is not a pair of numbers.
    assert status_delta(before, after) == {"threads_running": -2.0}


def test_status_delta_big_counters_are_exact_and_case_of_before_does_not_matter():
    # 2**63 + 1 - 2**63 as floats would be 0; subtracting the integers keeps the 1.
    before = {"HANDLER_READ_NEXT": str(2**63)}
    after = {"Handler_read_next": str(2**63 + 1)}
    assert status_delta(before, after) == {"handler_read_next": 1.0}


def test_status_delta_rejects_non_finite_and_odd_number_text():
    before = {"a": "nan", "b": "inf", "c": "1_000", "d": " 12 ", "e": "1e3", "f": "-2"}
    after = {"a": "1", "b": "1", "c": "2_000", "d": "15", "e": "2.5e3", "f": "3"}
    assert status_delta(before, after) == {"d": 3.0, "e": 1500.0, "f": 5.0}


# --------------------------------------------------------------------------- explaining_counters

MB = 1 << 20
POINTS = [1 * MB, 4 * MB, 16 * MB, 64 * MB]  # tmp_table_size
NOISE = [0.0, 1.0, -1.0]


def _study() -> list[tuple[int, float, dict[str, float]]]:
    """4 points x 3 runs: a GROUP BY spills to disk at 1M and 4M, fits in memory from 16M."""
    rng = np.random.default_rng(7)
    seconds = [10.0, 8.0, 2.0, 2.0]
    disk = [1.0, 1.0, 0.0, 0.0]
    written = [8e8, 4e8, 0.0, 0.0]
    out = []
    for i, point in enumerate(POINTS):
        for noise in NOISE:
            metric = seconds[i] + 0.1 * noise
            deltas = {
                "created_tmp_disk_tables": disk[i],
                "innodb_data_written": written[i] + (1e7 * noise if written[i] else 0.0),
                "uptime": round(metric + 1.0),  # the run's duration: tracks the metric, circular
                "questions": 12.0,
                "noisy": float(rng.uniform(0, 1000)),
            }
            out.append((point, metric, deltas))
    return out


def test_explaining_counters_finds_the_spill():
    found = explaining_counters(_study())
    # innodb_data_written first: its 3 levels follow the metric's ranks more closely than the
    # 1/0 of created_tmp_disk_tables, whose six tied 1s and six tied 0s cap its Spearman.
    assert [e.name for e in found] == ["innodb_data_written", "created_tmp_disk_tables"]
    written, disk = found
    # Hand check on data/1e8: levels 8, 4, 0, 0 with +-0.1 noise on the first two, mean 3.
    # between = 3 * (25 + 1 + 9 + 9) = 132; within = 4 * 0.01 = 0.04.
    assert written.eta_squared == pytest.approx(132 / 132.04)
    assert written.per_point == pytest.approx({POINTS[0]: 8e8, POINTS[1]: 4e8,
                                               POINTS[2]: 0.0, POINTS[3]: 0.0})
    assert written.spread == 1.0  # some point at 0, another not
    assert disk.eta_squared == 1.0 and disk.spread == 1.0
    # The metric falls as the counters fall: positive rank correlation.
    assert written.spearman > 0.8 and disk.spearman > 0.8
    assert written.spearman > disk.spearman


def test_explaining_counters_rejects_uptime_constant_and_noise():
    # Without the ignore list uptime would explain (it is the run's duration), but questions is
    # constant and the noisy counter differs within points as much as between them.
    names = [e.name for e in explaining_counters(_study(), ignore=())]
    assert "uptime" in names
    assert "questions" not in names and "noisy" not in names
    assert "uptime" in DEFAULT_IGNORE and "questions" in DEFAULT_IGNORE


def test_spearman_sign_follows_the_metric():
    # Throughput instead of time: the metric rises as disk writes fall.
    flipped = [(p, -m, d) for p, m, d in _study()]
    found = explaining_counters(flipped)
    assert {e.name for e in found} == {"innodb_data_written", "created_tmp_disk_tables"}
    assert all(e.spearman < -0.8 for e in found)


def test_eta_squared_and_spread_hand_computed():
    # A: 9, 10, 11; B: 7, 8, 9. Mean 9; between = 3*(1 + 1) = 6; within = 2 + 2 = 4 -> 0.6.
    # Medians 10 and 8 -> spread (10 - 8) / 10 = 0.2.
    study = [("A", 1.0, {"c": 9.0}), ("A", 2.0, {"c": 10.0}), ("A", 3.0, {"c": 11.0}),
             ("B", 4.0, {"c": 7.0}), ("B", 5.0, {"c": 8.0}), ("B", 6.0, {"c": 9.0})]
    assert explaining_counters(study) == []  # 0.6 < 0.8
    (found,) = explaining_counters(study, min_eta_squared=0.5)
    assert found.eta_squared == pytest.approx(0.6)
    assert found.spread == pytest.approx(0.2)
    assert found.per_point == {"A": 10.0, "B": 8.0}
    assert explaining_counters(study, min_eta_squared=0.5, min_spread=0.21) == []


def test_single_run_per_point_uses_spread_alone():
    study = [("A", 1.0, {"c": 10.0, "d": 10.0}), ("B", 2.0, {"c": 0.0, "d": 9.0})]
    (found,) = explaining_counters(study)  # d: spread 0.1 < 0.2
    assert found.name == "c" and found.eta_squared == 1.0 and found.spearman == pytest.approx(-1)


def test_missing_counter_only_drops_that_measurement():
    study = [("A", 1.0, {"c": 5.0}), ("A", 1.0, {}), ("B", 2.0, {"c": 0.0}),
             ("B", 2.0, {"c": 0.0})]
    (found,) = explaining_counters(study)
    assert found.per_point == {"A": 5.0, "B": 0.0}


def test_at_most_two_per_family_preferred():
    study = []
    for i, point in enumerate("ABC"):
        for run in range(2):
            level = 3 - i
            deltas = {
                "com_select": level * 100.0,
                "com_update": level * 50.0,
                "com_delete": level * 40.0,
                # One event under three names: synonyms, one of them shown first.
                "innodb_buffer_pool_reads": level * 1.0,
                "innodb_pages_read": level * 1.0,
                "innodb_data_reads": level * 1.0,
            }
            study.append((point, level + run * 0.1, deltas))
    names = [e.name for e in explaining_counters(study, top=3)]
    assert names == ["innodb_buffer_pool_reads", "com_select", "com_update"]
    # With room to spare, the others still come, after the rest.
    names = [e.name for e in explaining_counters(study, top=6)]
    assert names[:3] == ["innodb_buffer_pool_reads", "com_select", "com_update"]
    assert set(names[3:]) == {"com_delete", "innodb_data_reads", "innodb_pages_read"}


def test_top_and_empty():
    assert explaining_counters([]) == []
    assert explaining_counters([("A", 1.0, {"c": 1.0}), ("A", 2.0, {"c": 2.0})]) == []
    assert len(explaining_counters(_study(), top=1)) == 1
    with pytest.raises(ValueError):
        explaining_counters(_study(), top=-1)


# --------------------------------------------------------------------------- describe


def test_describe_counts():
    per_point = {MB: 1.0, 2 * MB: 1.0, 4 * MB: 1.0, 8 * MB: 1.0, 16 * MB: 0.0, 32 * MB: 0.0}
    ev = CounterEvidence("created_tmp_disk_tables", per_point, 1.0, 0.9, 1.0)
    assert describe(ev, format_size) == "created_tmp_disk_tables: 1 per run at 1M–8M, 0 from 16M"


def test_describe_bytes():
    ev = CounterEvidence("innodb_data_written", {MB: 8.2e8, 16 * MB: 0.0, 32 * MB: 0.0},
                         1.0, 0.9, 1.0)
    assert describe(ev, format_size) == "innodb_data_written: 820 MB per run at 1M, 0 from 16M"


def test_describe_rounding_units_and_positions():
    ev = CounterEvidence("innodb_os_log_written", {"a": 999_999.0, "b": 1_234_567.0,
                                                   "c": 2.5e9, "d": 512.0}, 1.0, None, 1.0)
    # 999 999 rounds to 3 significant digits first, so it reads 1 MB, not 1000 KB.
    assert describe(ev, str) == ("innodb_os_log_written: 1 MB per run at a, 1.23 MB at b, "
                                 "2.5 GB at c, 512 B at d")
    # Pages, not bytes, despite the _written suffix; values rounded to 3 significant digits
    # merge into one group; a last group of one point is "at", not "from".
    ev = CounterEvidence("innodb_pages_written", {"a": 12_345.0, "b": 12_349.0, "c": 0.25},
                         1.0, None, 1.0)
    assert describe(ev, str, per="per query") == ("innodb_pages_written: 12300 per query at a–b, "
                                                  "0.25 at c")
    ev = CounterEvidence("select_scan", {"a": 2.0, "b": 2.0}, 1.0, None, 0.0)
    assert describe(ev, str) == "select_scan: 2 per run at all points"


# --------------------------------------------------------------------------- properties

_names = st.sampled_from(["c", "d", "innodb_data_written", "uptime", "com_select"])
_measurement = st.tuples(st.sampled_from(["A", "B", "C"]), st.floats(allow_nan=False),
                         st.dictionaries(_names, st.floats(allow_nan=False), max_size=5))


@settings(max_examples=300, deadline=None)
@given(st.lists(_measurement, max_size=10), st.integers(0, 4))
def test_explaining_counters_never_raises(measurements, top):
    found = explaining_counters(measurements, top=top)
    assert len(found) <= top
    for ev in found:
        assert 0.0 <= ev.eta_squared <= 1.0 and 0.0 <= ev.spread <= 1.0
        assert ev.spearman is None or -1.0 <= ev.spearman <= 1.0
        assert all(math.isfinite(v) for v in ev.per_point.values())
        assert describe(ev, str).startswith(ev.name + ": ")


def test_clock_like_counters_never_explain():
    # query_time and once-a-second background loops grow with the run's length, like the metric.
    measurements = []
    for key, seconds in (("1M", 4.0), ("16M", 2.5), ("256M", 1.0)):
        for wobble in (0.0, 0.01):
            measurements.append((key, seconds + wobble, {
                "query_time": seconds + wobble, "innodb_master_thread_idle_loops": round(seconds),
                "innodb_background_log_sync": round(seconds),
                "created_tmp_disk_tables": 1.0 if key != "256M" else 0.0}))
    names = [e.name for e in explaining_counters(measurements)]
    assert names == ["created_tmp_disk_tables"]


# --------------------------------------------------------------------------- counters and levels


def _buffer_pool_study():
    """sysbench oltp_read_write, innodb_buffer_pool_size 16M vs 256M, 2 starts each, 20 s:
    762 vs 1,992 tps. The per-measurement SHOW GLOBAL STATUS deltas as the store holds them
    (names and sizes as MariaDB 10.11 gave them): at 16M every transaction reads 22.5 pages
    from disk, at 256M 0.08. Levels (checkpoint age, history length, pages free) and
    positions (LSNs) change too, and with only two points they separate the points perfectly."""
    from knoblab.store import Trial, TrialState

    trials = []
    for idx, (tps, reads, flushed, lru, wobble) in enumerate(
            ((762.0, 22.5, 6.1, 2.9, (1.0, 1.03)), (1992.0, 0.08, 0.9, 0.0, (1.0, 0.86)))):
        for rep, w in enumerate(wobble):
            trx = round(tps * w * 20)
            status = {
                "Innodb_buffer_pool_reads": round(reads * trx),
                "Innodb_data_reads": round(reads * trx) + 3,
                "Innodb_pages_read": round(reads * trx),
                "Innodb_data_read": round(reads * trx) * 16384,
                "Innodb_buffer_pool_read_requests": 480 * trx,
                "Innodb_buffer_pool_pages_flushed": round(flushed * trx),
                "Innodb_buffer_pool_pages_LRU_flushed": round(lru * trx),
                "Innodb_buffer_pool_pages_made_young": round(reads * 1.7 * trx),
                "Innodb_os_log_written": 2700 * trx,
                "Com_commit": trx,
                "Handler_read_key": 110 * trx,
                # Levels and positions: their deltas are what the issue saw "per transaction".
                "Innodb_checkpoint_age": -2730 if idx == 0 else 58_000_000 + 9_000 * rep,
                "Innodb_history_list_length": -12 if idx == 0 else 3_100 + 40 * rep,
                "Innodb_lsn_last_checkpoint": 41_000_000 + 100 * rep if idx == 0 else 1_200 + rep,
                "Innodb_lsn_current": 2700 * trx,
                "Innodb_buffer_pool_pages_free": 0 if idx == 0 else -9_000 - 50 * rep,
                "Innodb_buffer_pool_pages_data": 0 if idx == 0 else 9_000 + 50 * rep,
            }
            status = {name.lower(): value for name, value in status.items()}  # as stored
            levels = {"innodb_buffer_pool_pages_free": 0.0 if idx == 0 else 5_000.0 + rep,
                      "innodb_checkpoint_age": 1.1e7 + rep if idx == 0 else 7.4e7 + rep}
            trials.append(Trial(len(trials), idx, rep, len(trials), TrialState.DONE,
                                tps * w, {}, {"status": status, "levels": levels,
                                              "transactions": trx}, None))
    return trials


def test_buffer_pool_sweep_is_explained_by_reads_from_disk_not_by_levels():
    from knoblab import results
    from knoblab.workloads.sysbench import SysbenchWorkload as Sysbench

    trials = _buffer_pool_study()
    by_point = {0: trials[:2], 1: trials[2:]}
    points = [({"innodb_buffer_pool_size": "16M"}, {"innodb_buffer_pool_size": "16777216"}),
              ({"innodb_buffer_pool_size": "256M"}, {"innodb_buffer_pool_size": "268435456"})]
    (explanation,) = results._explanations(by_point, points, [], [None, None], Sysbench)
    names = [c.counter for c in explanation.counters]
    assert names[0] in ("innodb_buffer_pool_reads", "innodb_data_reads", "innodb_pages_read")
    assert explanation.counters[0].text.startswith(
        f"{names[0]}: 22.5 per transaction at 16M, 0.08") or names[0] != \
        "innodb_buffer_pool_reads"
    # No level or position divided by work; a level, if shown, is shown as a level.
    for counter in explanation.counters:
        assert not counter.counter.startswith(("innodb_lsn_", "innodb_history_list"))
        if counter.counter in ("innodb_checkpoint_age", "innodb_buffer_pool_pages_free"):
            assert "(level)" in counter.text and "per transaction" not in counter.text
        else:
            assert evidence_kind(counter.counter) == "counter"
            assert all(v >= 0 for v in counter.per_point.values())
    # Costs come before what merely describes the work (pages made young, read requests), and
    # the four names InnoDB counts a page read from disk under are shown once, not four times.
    assert names[:3] == ["innodb_buffer_pool_reads", "innodb_buffer_pool_pages_flushed",
                         "innodb_buffer_pool_pages_lru_flushed"]
    assert all(is_cost(n) for n in names[:3]) and not is_cost(names[3])
    assert sum(n in ("innodb_pages_read", "innodb_data_reads", "innodb_data_read")
               for n in names[:4]) == 0


def test_counters_levels_and_positions_by_name_and_behaviour():
    assert evidence_kind("Innodb_buffer_pool_reads") == "counter"
    assert evidence_kind("innodb_buffer_pool_pages_flushed") == "counter"
    assert evidence_kind("Threads_created") == "counter"
    assert evidence_kind("Opened_tables") == "counter"
    for level in ("Innodb_checkpoint_age", "Innodb_history_list_length", "Threads_running",
                  "Open_tables", "Innodb_buffer_pool_pages_free", "Memory_used",
                  "Innodb_row_lock_current_waits", "Innodb_data_pending_reads"):
        assert evidence_kind(level) == "level", level
    for position in ("Innodb_lsn_current", "Innodb_lsn_last_checkpoint", "Innodb_max_trx_id"):
        assert evidence_kind(position) == "position", position
    # A name the rules take for a counter but that went down is a level, and does not explain.
    study = [("A", 1.0, {"odd_gauge": 5.0, "c": 1.0}), ("A", 1.1, {"odd_gauge": 5.1, "c": 1.0}),
             ("B", 2.0, {"odd_gauge": -3.0, "c": 0.0}), ("B", 2.1, {"odd_gauge": -3.1, "c": 0.0})]
    assert [e.name for e in explaining_counters(study)] == ["c"]
    # Levels only when asked for, and described without "per".
    study = [("A", 1.0, {"innodb_history_list_length": 4.0}),
             ("B", 2.0, {"innodb_history_list_length": 1.0})]
    assert explaining_counters(study) == []
    (found,) = explaining_counters(study, kind="level")
    assert describe(found, str, "per query") == "innodb_history_list_length (level): 4 at A, 1 at B"


def test_ranked_by_the_size_of_the_change_costs_weighted():
    # Two points, two runs each: every figure here has eta² ~ 1 and |rho| = 1.
    study = []
    for point, tps, factor in (("A", 100.0, 1.0), ("B", 300.0, 0.0)):
        for run in (0.0, 0.01):
            study.append((point, tps + run, {
                "handler_read_next": 900.0 * factor + 10.0 + run,  # big, in memory
                "sort_merge_passes": 0.5 * factor + run / 100,  # 500 once weighted
                "innodb_buffer_pool_reads": 20.0 * factor + run,
                "innodb_data_read": 20.0 * factor * 16384 + run,  # bytes: 20 pages, a tie
                "qcache_inserts": 0.7 * factor + run / 100,  # in memory, smaller
            }))
    names = [e.name for e in explaining_counters(study)]
    # reads and data_read (bytes) tie: the count first, its volume in bytes (a synonym) last.
    assert names == ["innodb_buffer_pool_reads", "handler_read_next", "sort_merge_passes",
                     "qcache_inserts", "innodb_data_read"]
    # A few reads over a whole run (a remnant of the warm-up) do not outrank what changed.
    study = [(p, m, {**d, "innodb_buffer_pool_reads": 0.0002 * (1 + (p == "A")) + m % 1 / 1e6})
             for p, m, d in study]
    names = [e.name for e in explaining_counters(study)]
    assert names.index("qcache_inserts") < names.index("innodb_buffer_pool_reads")


def test_a_capacity_restates_the_setting_and_never_explains():
    """A buffer-pool sweep, its levels as MariaDB 10.11 reports them: pages_total is the pool's
    size in pages, and Innodb_ibuf_size holds the change buffer's maximum (a quarter of the
    pool's pages) in its upper 32 bits: 253 x 2^32 + 1 at 16M, 4056 x 2^32 + 1 at 256M. Both
    follow the setting exactly; only the pages left free say what the workload did."""
    for name in ("Innodb_buffer_pool_pages_total", "Innodb_ibuf_size",
                 "Innodb_ibuf_segment_size", "Innodb_page_size", "Innodb_checkpoint_max_age"):
        assert evidence_kind(name) == "capacity", name
    assert evidence_kind("Innodb_buffer_pool_pages_free") == "level"
    study = [(point, tps + run, {
        "innodb_buffer_pool_pages_total": float(total),
        "innodb_ibuf_size": float((total // 4) * 2**32 + 1),
        "innodb_buffer_pool_pages_free": free + run * 10,
    }) for point, tps, total, free in (("16M", 100.0, 1014, 0.0), ("256M", 300.0, 16224, 9000.0))
        for run in (0.0, 1.0)]
    found = explaining_counters(study, kind="level")
    assert [e.name for e in found] == ["innodb_buffer_pool_pages_free"]
    assert all("8710000000000" not in describe(e, str) and "e+12" not in describe(e, str)
               for e in found)
    assert explaining_counters(study) == []  # nor as counters
