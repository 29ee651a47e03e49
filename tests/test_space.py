"""The search space: ranges read against the server's limits and block sizes."""

from __future__ import annotations

import pytest

from knoblab.catalog import Catalog, Knob
from knoblab.errors import UserError
from knoblab.space import auto_space, parse_space


def _catalog() -> Catalog:
    def size(name: str, low: int, high: int, block: int | None) -> Knob:
        return Knob(name, "BIGINT UNSIGNED", "SESSION", str(low), low, high, block, (), True, True)

    return Catalog("MariaDB 10.11 (test)", {
        "read_buffer_size": size("read_buffer_size", 8192, 2**31, 4096),
        "sort_buffer_size": size("sort_buffer_size", 1024, 2**40, None),
        "optimizer_search_depth": Knob("optimizer_search_depth", "INT UNSIGNED", "SESSION",
                                       "62", 0, 62, None, (), True, True),
        "innodb_flush_method": Knob("innodb_flush_method", "ENUM", "GLOBAL", "O_DIRECT", None,
                                    None, None, ("fsync", "O_DSYNC", "O_DIRECT"), False, True),
        "long_query_time": Knob("long_query_time", "DOUBLE", "SESSION", "10", 0, 3.1e7, None,
                                (), True, True),
    })


def test_ranges_are_on_the_servers_block_size_and_searched_on_a_log_scale():
    space = parse_space({"read_buffer_size": ["10000", "1M"],
                         "sort_buffer_size": {"low": "32K", "high": "64M", "scale": "linear"},
                         "innodb_flush_method": ["fsync", "o_direct"]}, _catalog())
    read, sort, flush = space.dimensions
    assert (read.low, read.high, read.step, read.log) == (12288, 1048576, 4096, True)
    assert (sort.low, sort.high, sort.log) == (32768, 67108864, False)
    assert flush.choices == ("fsync", "O_DIRECT")  # as the server spells them
    # A sampled value lands on the block size, inside the range.
    assert read.value(20000) == "20480" and read.value(5) == "12288"
    assert space.config({"read_buffer_size": 1048576, "sort_buffer_size": 40000,
                         "innodb_flush_method": "fsync"}) == {
        "read_buffer_size": "1048576", "sort_buffer_size": "40000",
        "innodb_flush_method": "fsync"}
    assert space.names == ["read_buffer_size", "sort_buffer_size", "innodb_flush_method"]


@pytest.mark.parametrize("knobs, words", [
    ({}, ["[tune.knobs] is empty"]),
    ({"read_buffer_size": ["4K", "1M"]}, ["read_buffer_size", "out of range", "8K"]),
    ({"read_buffer_size": ["1M", "64K"]}, ["range", "empty"]),
    ({"read_buffer_size": ["8200", "10000"]}, ["one value", "block size of 4K"]),
    ({"read_buffer_size": "1M"}, ["give a range as [low, high]"]),
    ({"read_buffer_size": {"low": "8K"}}, ["low = ..., high = ..."]),
    ({"read_buffer_size": {"low": "8K", "high": "1M", "scale": "cubic"}}, ["scale", "log"]),
    ({"optimizer_search_depth": [0, 62]}, ["log scale", "low end above 0"]),
    ({"innodb_flush_method": ["fsync"]}, ["at least two"]),
    ({"innodb_flush_method": ["fsync", "FSYNC"]}, ["listed twice"]),
    ({"innodb_flush_method": ["fsync", "mmap"]}, ["allowed one of fsync"]),
    ({"long_query_time": [1, 2]}, ["fractional"]),
    ({"read_buffer_size": ["8K", "1M"], "READ-BUFFER-SIZE": ["8K", "2M"]}, ["one setting"]),
    ({"no_such_knob": ["8K", "1M"]}, ["'no_such_knob' is not a setting"]),
    ({"innodb_flush_method": ["fsync", "fsync "]}, ["listed twice"]),
])
def test_a_space_that_cannot_be_searched_is_refused_in_one_line(knobs, words):
    with pytest.raises(UserError) as caught:
        parse_space(knobs, _catalog())
    message = str(caught.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_auto_picks_this_servers_performance_settings_within_its_limits_and_the_budget(catalog):
    budget = 2 << 30
    space, left_out = auto_space(catalog, budget, durability=False)
    by_name = {d.name: d for d in space.dimensions}
    assert 8 <= len(by_name) <= 15
    assert {"sort_buffer_size", "join_buffer_size", "tmp_table_size"} <= set(by_name)
    # Durability trade-offs only with consent; settings this server lacks are named.
    assert "innodb_flush_log_at_trx_commit" not in by_name
    assert all("(" in note for note in left_out)
    for d in space.dimensions:
        knob = catalog.knobs[d.name]
        if d.choices:
            continue
        assert d.low is not None and d.high is not None and d.low < d.high
        assert knob.minimum is None or d.low >= knob.minimum
        assert knob.maximum is None or d.high <= knob.maximum
        assert d.low % d.step == 0 and d.high % d.step == 0
    # The memory budget bounds the big buffers.
    assert (by_name["innodb_buffer_pool_size"].high or 0) <= budget // 2
    assert (by_name["sort_buffer_size"].high or 0) <= budget // 64
    with_consent, _ = auto_space(catalog, budget, durability=True)
    assert "innodb_flush_log_at_trx_commit" in {d.name for d in with_consent.dimensions}


def test_a_list_of_values_of_a_size_is_searched_as_those_values_only():
    space = parse_space({"sort_buffer_size": {"values": ["64K", "2M", "16M"]},
                         "read_buffer_size": ["8K", "1M"]}, _catalog())
    sort = space.dimensions[0]
    assert sort.choices == ("65536", "2097152", "16777216")
    assert sort.describe() == "sort_buffer_size: one of 64K, 2M, 16M"
    with pytest.raises(UserError, match="out of range"):
        parse_space({"read_buffer_size": {"values": ["1K", "1M"]}}, _catalog())
