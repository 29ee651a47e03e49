"""Tests for runner.plan_order: seeded, interleaved rounds of every point."""

from hypothesis import given
from hypothesis import strategies as st

from knoblab.runner import plan_order


def _rounds(order, n_points):
    return [order[i:i + n_points] for i in range(0, len(order), n_points)]


@given(st.integers(min_value=1, max_value=25), st.integers(min_value=1, max_value=12),
       st.integers(min_value=0, max_value=2**63 - 1))
def test_every_round_visits_every_point_once(n_points, repetitions, seed):
    order = plan_order(n_points, repetitions, seed)
    assert len(order) == n_points * repetitions
    assert len(set(order)) == len(order)  # no (point, repetition) twice
    rounds = _rounds(order, n_points)
    assert len(rounds) == repetitions
    for repetition, round_ in enumerate(rounds):
        assert sorted(p for p, _ in round_) == list(range(n_points))
        assert {r for _, r in round_} == {repetition}


def test_counts_per_point():
    order = plan_order(7, 4, seed=3)
    assert len(order) == 28
    for point in range(7):
        assert sorted(r for p, r in order if p == point) == [0, 1, 2, 3]


def test_deterministic_for_a_seed():
    assert plan_order(10, 5, 1) == plan_order(10, 5, 1)
    assert plan_order(10, 5, 12345) == plan_order(10, 5, 12345)


def test_different_seeds_differ():
    plans = {tuple(plan_order(10, 5, seed)) for seed in range(20)}
    assert len(plans) == 20


def test_order_is_shuffled_not_sorted():
    order = plan_order(10, 5, 1)
    rounds = _rounds(order, 10)
    sorted_round = [(p, 0) for p in range(10)]
    assert rounds[0] != sorted_round
    # Each round is shuffled afresh: not the same order of points every round.
    assert len({tuple(p for p, _ in round_) for round_ in rounds}) > 1


def test_points_are_interleaved():
    # Not all repetitions of one point before the next point: every point appears again after
    # every other point has been visited (machines drift; the drift must not follow the point).
    order = plan_order(4, 5, seed=7)
    for a in range(4):
        for b in range(4):
            if a == b:
                continue
            positions_a = [i for i, (p, _) in enumerate(order) if p == a]
            positions_b = [i for i, (p, _) in enumerate(order) if p == b]
            assert max(positions_a) > min(positions_b)
            assert max(positions_b) > min(positions_a)


def test_two_points_alternate_by_rounds():
    order = plan_order(2, 6, seed=0)
    first_half = {p for p, _ in order[:6]}
    assert first_half == {0, 1}
    # A point never runs more than twice in a row (end of one round, start of the next).
    points = [p for p, _ in order]
    assert all(not (points[i] == points[i + 1] == points[i + 2]) for i in range(len(points) - 2))


def test_edge_cases():
    assert plan_order(0, 5, 1) == []
    assert plan_order(3, 0, 1) == []
    assert plan_order(1, 3, 1) == [(0, 0), (0, 1), (0, 2)]


@given(st.integers(min_value=1, max_value=12), st.integers(min_value=1, max_value=30),
       st.integers(min_value=0, max_value=2**63 - 1))
def test_every_point_takes_every_place_once_in_each_run_of_n_rounds(n_points, repetitions, seed):
    # The first measurement after a start may be slower or faster than the others: over
    # every n rounds, each point is first (and second, …) exactly once.
    rounds = _rounds(plan_order(n_points, repetitions, seed), n_points)
    for first in range(0, repetitions - n_points + 1, n_points):
        block = rounds[first:first + n_points]
        for place in range(n_points):
            assert sorted(round_[place][0] for round_ in block) == list(range(n_points))


def test_with_two_points_the_first_alternates_round_by_round():
    for seed in range(20):
        firsts = [round_[0][0] for round_ in _rounds(plan_order(2, 8, seed), 2)]
        assert all(firsts[i] != firsts[i + 1] for i in range(0, 8, 2)), (seed, firsts)
