"""The search space: ranges read against the server's limits and block sizes."""

from __future__ import annotations

import pytest

from knoblab.catalog import Catalog, Knob
from knoblab.errors import UserError
from knoblab.search.space import auto_space, parse_space


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
    # Every value a log-scale search of sizes samples here lands on 2M: one configuration.
    ({"sort_buffer_size": ["2M", "2200K"]}, ["holds one value (2M)", "scale = \"linear\""]),
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


def _durability_catalog() -> Catalog:
    return Catalog("MariaDB 10.11 (test)", {
        "innodb_flush_log_at_trx_commit": Knob("innodb_flush_log_at_trx_commit", "INT UNSIGNED",
                                               "GLOBAL", "1", 0, 3, None, (), True, True),
        "sync_binlog": Knob("sync_binlog", "INT UNSIGNED", "GLOBAL", "0", 0, 4294967295, None,
                            (), True, True),
        "innodb_doublewrite": Knob("innodb_doublewrite", "BOOLEAN", "GLOBAL", "ON", None, None,
                                   None, (), False, True),
        "innodb_flush_method": Knob("innodb_flush_method", "ENUM", "GLOBAL", "O_DIRECT", None,
                                    None, None, ("fsync", "O_DSYNC", "nosync", "O_DIRECT"),
                                    False, True),
    })


@pytest.mark.parametrize("knobs, words", [
    # The durability refusal comes before the log scale's (a range from 0) and names the values.
    ({"innodb_flush_log_at_trx_commit": [0, 2]}, ["0 and 2 give up durability"]),
    ({"innodb_flush_log_at_trx_commit": {"low": 0, "high": 2, "scale": "linear"}},
     ["0 and 2 give up durability"]),
    ({"innodb_flush_log_at_trx_commit": {"values": [1, 2]}}, ["2 gives up durability"]),
    ({"sync_binlog": [1, 4294967295]}, ["2 to 4294967295 give up durability"]),
    ({"sync_binlog": {"low": 0, "high": 3, "scale": "linear"}}, ["0, 2 and 3 give up"]),
    ({"innodb_doublewrite": ["ON", "OFF"]}, ["OFF gives up durability", "torn"]),
    ({"innodb_flush_method": ["fsync", "nosync"]}, ["nosync gives up durability"]),
    # Before the other faults of the same entry: listed twice, a single value.
    ({"innodb_doublewrite": ["OFF", "off"]}, ["OFF gives up durability"]),
])
def test_unsafe_values_are_refused_before_the_search_naming_them_and_the_opt_in(knobs, words):
    with pytest.raises(UserError) as caught:
        parse_space(knobs, _durability_catalog())
    text = str(caught.value)
    assert text.startswith(f"[tune.knobs] {next(iter(knobs))}: ")
    assert "allow_durability_tradeoff = true" in text and "\n" not in text
    for word in words:
        assert word in text


def test_unsafe_values_are_searched_with_the_opt_in_and_safe_ones_without():
    catalog = _durability_catalog()
    space = parse_space({"innodb_flush_log_at_trx_commit": {"low": 0, "high": 2,
                                                            "scale": "linear"},
                         "innodb_doublewrite": ["ON", "OFF"]}, catalog,
                        allow_durability_tradeoff=True)
    assert [d.name for d in space.dimensions] == ["innodb_flush_log_at_trx_commit",
                                                   "innodb_doublewrite"]
    safe = parse_space({"innodb_flush_log_at_trx_commit": {"values": [1, 3]},
                        "innodb_flush_method": ["fsync", "O_DIRECT"]}, catalog)
    assert safe.dimensions[0].choices == ("1", "3")
    # The entry's own faults are said as before once its values are safe.
    with pytest.raises(UserError, match="log scale"):
        parse_space({"innodb_flush_log_at_trx_commit": [0, 2]}, catalog,
                    allow_durability_tradeoff=True)


def test_an_auto_range_holds_the_value_in_force(catalog):
    """A captured production server's 32M buffer pool, or 48 GB of it on a budget of 8 GB:
    each range reaches the value every trial is measured against."""
    budget = 8 << 30
    plain, _ = auto_space(catalog, budget, durability=False)
    pool = {d.name: d for d in plain.dimensions}["innodb_buffer_pool_size"]
    assert pool.low == 128 << 20 and pool.high == budget // 2
    for now in (32 << 20, 48 << 30):
        space, _ = auto_space(catalog, budget, durability=False,
                              current={"innodb_buffer_pool_size": str(now),
                                       "sort_buffer_size": "not a size"})
        by_name = {d.name: d for d in space.dimensions}
        widened = by_name["innodb_buffer_pool_size"]
        assert widened.low == min(pool.low, now) and widened.high == max(pool.high, now)
        # A value that is no size leaves its range as it was.
        sort = {d.name: d for d in plain.dimensions}["sort_buffer_size"]
        assert (by_name["sort_buffer_size"].low, by_name["sort_buffer_size"].high) == \
            (sort.low, sort.high)
