"""knoblab verify's arithmetic, on counters made up to known answers: a window's figures (the
statements knoblab ran itself taken out, Little's law), the guard's bounds, the pairs' verdict
at sequential levels, the answer set beside a claim, and the recommendation read from what
knoblab tune wrote."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from knoblab.errors import UserError
from knoblab.stats import Statistics
from knoblab.verifying import (
    A,
    B,
    Claim,
    Decision,
    Guard,
    Tripped,
    Watch,
    Window,
    _digest_change,
    _top_digests,
    against_claim,
    decide,
    load_gone,
    read_recommendation,
)
from knoblab.vocabulary import Finding


def _window(side: int, questions: list[int], running: list[int], step: float = 0.5,
            **counters: list[int]) -> Window:
    samples = []
    for i, (q, r) in enumerate(zip(questions, running, strict=True)):
        status = {"Questions": str(q), "Threads_running": str(r)}
        status.update({k: str(v[i]) for k, v in counters.items()})
        samples.append((i * step, status))
    return Window(side, 0, 0.0, samples, own=len(samples) - 1)


def test_a_windows_figures_leave_knoblabs_own_statements_and_thread_out():
    # 10 s, 1,000 statements a second of the application's plus knoblab's one a reading;
    # Threads_running 5 with knoblab's own reading among them: 4 of the application's.
    readings = 21
    window = _window(0, [i * 500 + i for i in range(readings)], [5] * readings,
                     Innodb_buffer_pool_reads=[i * 50 for i in range(readings)])
    figures = window.figures()
    assert figures["statements_per_s"] == pytest.approx(1000)
    assert figures["threads_running"] == pytest.approx(4)
    assert figures["latency_ms"] == pytest.approx(4.0)  # Little: 4 in the server / 1000 a s
    assert figures["pool_reads_per_statement"] == pytest.approx(0.1)


def test_performance_schemas_digests_give_each_windows_own_latency():
    q1, q2, q3 = ("app", "d1"), ("app", "d2"), ("app", "d3")
    before = {q1: ("SELECT c FROM sbtest1 WHERE id = ?", 100, 100 * 10**9),
              q2: ("UPDATE sbtest1 SET k = k + ? WHERE id = ?", 50, 5 * 10**9),
              q3: ("DELETE FROM t WHERE id = ?", 9, 10**9)}
    after = {q1: ("SELECT c FROM sbtest1 WHERE id = ?", 300, 300 * 10**9),  # 1 ms each
             q2: ("UPDATE sbtest1 SET k = k + ? WHERE id = ?", 50, 5 * 10**9),  # none run
             ("app", "d4"): ("INSERT INTO t VALUES (?)", 100, 300 * 10**9)}  # new: 3 ms
    # q3 was dropped from the table to make room: it is not counted as run
    change = _digest_change(before, after)
    assert set(change) == {q1, ("app", "d4")}
    assert change[q1][1:] == (200, 200 * 10**9)
    window = _window(0, [0, 150, 300], [1, 2, 2])
    window.digests = change
    assert window.figures()["digest_latency_ms"] == pytest.approx((200 + 300) / 300)
    top = _top_digests({q1: ["SELECT …", 200, 200 * 10**9, 100, 50 * 10**9],
                        q2: ["UPDATE …", 10, 10**9, 0, 0]})
    assert [row["text"] for row in top] == ["SELECT …", "UPDATE …"]
    assert top[0]["latency_ms"] == {"a": 1.0, "b": 0.5}
    assert top[1]["latency_ms"] == {"a": 0.1, "b": None}


def test_the_guard_puts_b_back_past_its_latency_bound_and_not_before():
    reference = {"latency_ms": 2.0, "threads_running": 2.0, "errors_per_s": 0.0}
    watch = Watch(Guard(latency=2.0), reference)
    readings = 12
    slower = _window(B, [i * 250 + i for i in range(readings)], [4] * readings)  # 3 / 500: 6 ms
    fine = _window(B, [i * 500 + i for i in range(readings)], [3] * readings)  # 2 / 1000: 2 ms
    watch(fine)  # within every bound: nothing happens
    with pytest.raises(Tripped) as tripped:
        watch(slower)
    assert "past 2× A's 2.00 ms" in tripped.value.said
    assert tripped.value.crossed_at == pytest.approx((readings - 1) * 0.5)


def test_a_light_load_under_one_statement_running_is_still_guarded():
    # a fast server under a light load: a third of a statement in it on the average
    reference = {"latency_ms": 0.1, "threads_running": 0.1, "errors_per_s": 0.0}
    light = _window(B, [i * 500 + i for i in range(12)], [1, 1, 2] * 4)  # 0.33 ms
    with pytest.raises(Tripped, match="past 2× A's 0.10 ms"):
        Watch(Guard(latency=2.0), reference)(light)


def test_a_lasting_harm_is_put_back_though_as_spiky_stretches_of_a_hid_it():
    reference = {"latency_ms": 2.0, "threads_running": 2.0, "errors_per_s": 0.0}
    watch = Watch(Guard(latency=2.0), reference)
    # A's own 5-second stretches, one in five at 12 ms: the stretches' bound is 2 × 12 ms
    for latency in [2, 2, 2, 2, 12] * 2:
        running = latency + 1  # 1,000 statements a second; knoblab's own thread among them
        watch(_window(A, [i * 500 + i for i in range(12)], [running] * 12))
    assert watch.reference["latency_ms"] == pytest.approx(12.0)
    slower = [i * 500 + i for i in range(41)]  # B: 1,000 a second, 6 in the server: 6 ms
    watch(_window(B, slower[:17], [7] * 17))  # 8 s: its stretches are judged alone
    with pytest.raises(Tripped) as tripped:
        watch(_window(B, slower, [7] * 41))  # 20 s at 3× A's mean
    assert "over B's last 20 s, past 2× A's mean 2.00 ms" in tripped.value.said


def test_a_clear_difference_is_decided_at_the_third_pair_and_noise_is_not():
    statistics = Statistics()
    helped = decide([1.8, 1.9, 1.85], 10, statistics)
    assert helped.finding == Finding.HELPS and helped.decided
    assert helped.low < 1.85 < helped.high and helped.low > 1
    hurt = decide([0.5, 0.55, 0.52], 10, statistics)
    assert hurt.finding == Finding.HURTS
    noise = decide([1.05, 0.93, 1.02], 10, statistics)
    assert noise.finding == Finding.UNSHOWN and not noise.decided
    # two pairs never decide, however clear
    assert not decide([2.0, 2.1], 10, statistics).decided
    same = decide([1.001, 0.999, 1.0, 1.002, 0.998, 1.0], 10, statistics)
    assert same.finding == Finding.SAME


def test_production_is_set_beside_the_claim():
    claim = Claim(1.6, 1.2, 2.2, 0.99, "")

    def found(finding: Finding, low: float, high: float) -> Decision:
        return Decision(finding, math.sqrt(low * high), low, high, 0.97, 5, True)
    assert against_claim(found(Finding.HELPS, 1.4, 1.8), claim) == "held"
    assert against_claim(found(Finding.HELPS, 1.05, 1.15), claim) == "smaller than claimed"
    assert against_claim(found(Finding.HELPS, 2.3, 3.1), claim) == "larger than claimed"
    assert against_claim(found(Finding.HELPS, 1.1, 1.25), claim) == "held"  # overlaps at 1.2
    assert against_claim(found(Finding.UNSHOWN, 0.9, 1.2), claim) == "not shown"
    assert against_claim(found(Finding.SAME, 0.99, 1.01), claim) == "not shown"
    assert against_claim(found(Finding.HURTS, 0.6, 0.8), claim) == "contradicted"
    assert against_claim(found(Finding.HELPS, 1.4, 1.8), None) is None


def test_the_recommendation_and_its_claim_are_read_as_knoblab_tune_wrote_them(tmp_path: Path):
    (tmp_path / "recommended.cnf").write_text(
        "# knoblab tune, study x\n[mysqld]\ninnodb_buffer_pool_size = 160M\n"
        "innodb-io-capacity = 400   # a comment\n# left as they are: sort_buffer_size\n")
    (tmp_path / "tune.json").write_text(json.dumps({"recommended": {
        "changes": {"innodb_buffer_pool_size": str(160 << 20), "innodb_io_capacity": "400"},
        "gain": 0.66, "ci95": [0.12, 1.44], "confidence": 0.989, "said": "1.7× faster"}}))
    for source in (tmp_path, tmp_path / "recommended.cnf"):
        found = read_recommendation(str(source), store=None)
        assert found.settings == {"innodb_buffer_pool_size": "160M", "innodb_io_capacity": "400"}
        assert found.claim is not None and found.claim.ratio == pytest.approx(1.66)
        assert (found.claim.low, found.claim.high) == pytest.approx((1.12, 2.44))
    # a tune.json of another recommendation is not this one's claim
    (tmp_path / "tune.json").write_text(json.dumps({"recommended": {
        "changes": {"innodb_buffer_pool_size": "1G"}, "gain": 3.0, "ci95": [2, 4]}}))
    assert read_recommendation(str(tmp_path), store=None).claim is None
    (tmp_path / "empty.cnf").write_text("[client]\nuser = me\n")
    with pytest.raises(UserError, match="sets nothing"):
        read_recommendation(str(tmp_path / "empty.cnf"), store=None)
    with pytest.raises(UserError, match="no such file or folder"):
        read_recommendation(str(tmp_path / "nowhere"), store=None)


def test_an_idle_or_vanished_load_is_said_not_blamed_on_b():
    reference = {"latency_ms": 2.0, "threads_running": 2.0, "errors_per_s": 0.0,
                 "statements_per_s": 1000.0, "connections": 4.0}
    readings = 12
    # nothing runs and nothing finishes: idle, not a stall; the guard lets it be
    idle = _window(B, [i for i in range(readings)], [1] * readings)
    Watch(Guard(), reference)(idle)
    # work in the server that never finishes is a stall: put back
    stalled = _window(B, [i for i in range(readings)], [4] * readings)
    with pytest.raises(Tripped, match="no statement finished"):
        Watch(Guard(), reference)(stalled)
    gone = load_gone(idle.figures(), reference)
    assert gone is not None and "load stopped" in gone
    closed = _window(0, [i * 500 + i for i in range(readings)], [3] * readings,
                     Threads_connected=[3] * readings)  # 1 of the application's, 4 before
    said = load_gone(closed.figures(), reference)
    assert said is not None and "connections closed" in said
    steady = _window(0, [i * 500 + i for i in range(readings)], [3] * readings,
                     Threads_connected=[6] * readings)
    assert load_gone(steady.figures(), reference) is None
