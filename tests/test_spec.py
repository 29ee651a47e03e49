"""Tests for knoblab.spec: parse_spec on dicts, Spec.points against the real catalog, load_spec."""

import copy
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knoblab.errors import UserError
from knoblab.spec import (
    SECTION_KEYS,
    TOP_KEYS,
    Point,
    Statistics,
    load_spec,
    parse_spec,
)
from knoblab.workloads import KINDS
from knoblab.workloads.base import Rounds

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

MINIMAL = {
    "dataset": {"rows": 1000},
    "workload": {"sql": "SELECT COUNT(*) FROM dt2"},
    "sweep": {"read_buffer_size": ["64K", "128K"]},
}

WORKLOAD_KEYS = {name: set(kind.keys) for name, kind in KINDS.items()}


def _with(**changes):
    """MINIMAL with `section__key=value` (or `section=value`) changes; value None deletes."""
    data = copy.deepcopy(MINIMAL)
    for path, value in changes.items():
        parts = path.split("__")
        target = data
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        if value is None:
            target.pop(parts[-1], None)
        else:
            target[parts[-1]] = value
    return data


def _error(data) -> str:
    with pytest.raises(UserError) as info:
        parse_spec(data)
    message = str(info.value)
    assert "\n" not in message
    return message


# --------------------------------------------------------------------------- valid specs


def test_minimal_spec_and_defaults():
    spec = parse_spec(copy.deepcopy(MINIMAL), source="src", default_name="mine")
    assert spec.name == "mine"
    assert spec.description == ""
    assert spec.target.kind == "sandbox" and spec.target.binary is None
    assert spec.base_config == {}
    assert spec.workload.data.rows == 1000
    assert spec.workload.data.size_bytes is None
    assert spec.workload.data.engine == "MyISAM"
    assert spec.workload.sql == "SELECT COUNT(*) FROM dt2"
    assert spec.workload.cache == "warm"
    assert spec.workload.timed_runs == 1
    assert spec.workload.timeout == 3600.0
    assert spec.workload.rounds == Rounds(fixed=None, floor=3, ceiling=20, budget=None)
    assert spec.sweep == {"read_buffer_size": ["64K", "128K"]}
    assert spec.statistics == Statistics()
    assert spec.statistics.test == "welch-log"
    assert spec.source == "src"


def test_default_name_without_argument():
    assert parse_spec(copy.deepcopy(MINIMAL)).name == "experiment"


def test_full_spec():
    data = {
        "name": "scan", "description": "a scan",
        "server": {"kind": "sandbox", "binary": "/usr/sbin/mariadbd",
                   "config": {"sort_buffer_size": "2M"}},
        "dataset": {"kind": "scan-table", "size": "500M", "engine": "Aria"},
        "workload": {"kind": "query", "sql": "SELECT 1", "cache": "cold", "repetitions": 3,
                     "timed_runs": 2, "timeout": 60},
        "sweep": {"read_buffer_size": ["64K", 131072, "256k"]},
        "statistics": {"min_effect": 0.05, "alpha": 0.01, "confidence": 0.99,
                       "test": "mann-whitney", "seed": 42},
    }
    spec = parse_spec(data, default_name="ignored")
    assert spec.name == "scan"
    assert spec.description == "a scan"
    assert spec.target.binary.path == "/usr/sbin/mariadbd"
    assert spec.base_config == {"sort_buffer_size": "2M"}
    assert spec.workload.data.rows is None
    assert spec.workload.data.size_bytes == 500 << 20
    assert spec.workload.data.engine == "Aria"
    assert spec.workload.cache == "cold"
    assert spec.workload.timed_runs == 2
    assert spec.workload.timeout == 60.0
    assert isinstance(spec.workload.timeout, float)
    assert spec.workload.rounds == Rounds(fixed=3)
    assert spec.statistics == Statistics(min_effect=0.05, alpha=0.01, confidence=0.99,
                                         test="mann-whitney", seed=42)


@pytest.mark.server
def test_example_spec_loads_and_validates(catalog):
    spec = load_spec(EXAMPLES / "read-buffer-scan.toml")
    assert spec.name == "read-buffer-scan"
    assert spec.workload.rounds.fixed == 5
    assert spec.workload.data.rows == 2_000_000
    base, points, _ = spec.points(catalog)
    assert base == {}
    assert len(points) == 10
    assert points[0] == Point({"read_buffer_size": "8200"}, {"read_buffer_size": "8200"})
    assert points[-1].config == {"read_buffer_size": str(32 << 20)}
    assert "read_buffer_size" in spec.source


# --------------------------------------------------------------------------- error paths


@pytest.mark.parametrize(
    ("changes", "fragments"),
    [
        # unknown keys: where, which key, and the fix
        ({"sweeps": {"a": [1, 2]}}, ["the spec", "unknown key 'sweeps'", "did you mean 'sweep'?"]),
        ({"worklaod": {}}, ["unknown key 'worklaod'", "did you mean 'workload'?"]),
        ({"zzzzzz": 1}, ["unknown key 'zzzzzz'", "allowed: ", "dataset", "statistics"]),
        ({"workload__repetitons": 3},
         ["[workload]", "unknown key 'repetitons'", "did you mean 'repetitions'?"]),
        ({"dataset__row": 3}, ["[dataset]", "unknown key 'row'", "did you mean 'rows'?"]),
        ({"statistics__alpah": 0.1}, ["[statistics]", "'alpah'", "did you mean 'alpha'?"]),
        ({"server__binray": "x"}, ["[server]", "'binray'", "did you mean 'binary'?"]),
        # sections of the wrong shape
        ({"workload": "SELECT 1"}, ["[workload] must be a table"]),
        ({"server": ["x"]}, ["[server] must be a table"]),
        ({"server__config": "read_buffer_size=1"}, ["[server.config] must be a table"]),
        # [workload]
        ({"workload__repetitions": 0},
         ["[workload] repetitions = 0", "whole number", "1 to 10000"]),
        ({"workload__repetitions": 10_001}, ["[workload] repetitions = 10001", "1 to 10000"]),
        ({"workload__repetitions": "5"}, ["[workload] repetitions = '5'", "whole number"]),
        ({"workload__repetitions": 2.5}, ["[workload] repetitions = 2.5", "whole number"]),
        ({"workload__repetitions": True}, ["[workload] repetitions = True", "whole number"]),
        ({"workload__repetitions": "Auto"}, ["[workload] repetitions = 'Auto'", '"auto"']),
        ({"workload__repetitions": "auto", "workload__min_repetitions": 5,
          "workload__max_repetitions": 4},
         ["max_repetitions = 4 is below min_repetitions = 5"]),
        ({"workload__repetitions": "auto", "workload__min_repetitions": 1},
         ["min_repetitions = 1", "from 2", "at least two measurements"]),
        ({"workload__repetitions": 5, "workload__budget": "10m"},
         ["budget applies only to repetitions = \"auto\""]),
        ({"workload__budget": "soon"}, ["[workload] budget", "'soon' is not a duration"]),
        ({"workload__budget": 0}, ["[workload] budget", "0 is not a duration"]),
        ({"statistics__min_effect": 0}, ["[statistics] min_effect = 0", "between 0 and 1"]),
        ({"statistics__min_effect": 1.0}, ["[statistics] min_effect = 1.0", "between 0 and 1"]),
        ({"workload__timed_runs": 0}, ["[workload] timed_runs = 0", "whole number"]),
        ({"workload__timeout": 0}, ["[workload] timeout = 0", "a number from"]),
        ({"workload__timeout": "1h"}, ["[workload] timeout = '1h'", "a number"]),
        ({"workload__cache": "hot"}, ["[workload] cache = 'hot'", '"warm" or "cold"']),
        ({"workload__cache": 1}, ["[workload] cache = 1", "must be text"]),
        ({"workload__sql": None}, ["[workload] sql", "give the statement", "sql = "]),
        ({"workload__sql": "  "}, ["[workload] sql", "give the statement"]),
        ({"workload__sql": 5}, ["[workload] sql = 5", "must be text"]),
        ({"workload__kind": "tpcc"}, ["[workload] kind = 'tpcc'", '"query"', '"script"']),
        # [statistics]
        ({"statistics__test": "t-test"},
         ["[statistics] test = 't-test'", "welch-log", "mann-whitney"]),
        ({"statistics__test": 3}, ["[statistics] test = 3", "must be text"]),
        ({"statistics__alpha": 0.9}, ["[statistics] alpha = 0.9", "a number from"]),
        ({"statistics__alpha": "0.05"}, ["[statistics] alpha = '0.05'", "a number"]),
        ({"statistics__confidence": 1.0}, ["[statistics] confidence = 1.0"]),
        ({"statistics__min_effect": -0.1}, ["[statistics] min_effect = -0.1"]),
        ({"statistics__seed": -1}, ["[statistics] seed = -1", "whole number"]),
        ({"statistics__seed": 1.5}, ["[statistics] seed = 1.5", "whole number"]),
        # [sweep]
        ({"sweep": None}, ["[sweep]", "at least one setting", "read_buffer_size = "]),
        ({"sweep": {}}, ["[sweep]", "at least one setting"]),
        ({"sweep": "read_buffer_size"}, ["[sweep]", "at least one setting"]),
        # (a setting given fewer than two values: Spec.points, tests/test_messages_true.py)
        ({"sweep__rows": [1000]}, ["[sweep] rows", "at least two values"]),
        ({"sweep__read_buffer_size": ["64K", {"value": "128K"}]},
         ["[sweep] read_buffer_size", "{'value': '128K'}", "not a single value"]),
        ({"sweep__read_buffer_size": ["64K", ["128K", "256K"]]},
         ["[sweep] read_buffer_size", "not a single value"]),
        # [dataset]
        ({"dataset__size": "1G"}, ["[dataset]", "exactly one of rows", "size"]),
        ({"dataset__rows": None}, ["[dataset]", "exactly one of rows"]),
        ({"dataset__rows": "1000"}, ["[dataset] rows = '1000'", "whole number"]),
        ({"dataset__rows": 10.5}, ["[dataset] rows = 10.5", "whole number"]),
        ({"dataset__rows": True}, ["[dataset] rows = True", "whole number"]),
        ({"dataset__rows": 0}, ["[dataset] rows = 0", "at least 1"]),
        ({"dataset__rows": None, "dataset__size": "12Q"},
         ["[dataset] size", "'12Q'", "K, M, G or T"]),
        ({"dataset__rows": None, "dataset__size": "0"}, ["[dataset] size", "at least 1"]),
        ({"dataset__rows": None, "dataset__size": -5}, ["[dataset] size", "negative"]),
        ({"dataset__engine": "Foo"}, ["[dataset] engine = 'Foo'", "MyISAM", "InnoDB"]),
        ({"dataset__engine": 3}, ["[dataset] engine = 3", "must be text"]),
        ({"dataset__kind": "tpcc"}, ["[dataset] kind = 'tpcc'", '"scan-table"']),
        # [server]
        ({"server__kind": "cloud"}, ["[server] kind = 'cloud'", '"sandbox"', '"external"']),
    ],
    ids=lambda v: repr(v)[:60] if isinstance(v, dict) else None,
)
def test_bad_spec_names_section_key_and_fix(changes, fragments):
    message = _error(_with(**changes))
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


@pytest.mark.parametrize("binary", [5, ["mariadbd"], {"path": 5}, {"preload": "jemalloc"},
                                    {"path": "mariadbd", "preload": ""}, True, 1.5])
def test_server_binary_must_be_text(binary):
    # Otherwise find_binary() gets a non-string and fails with a TypeError traceback
    # (`"/" in 5`) when the run starts.
    message = _error(_with(server__binary=binary))
    assert "[server] binary" in message


def test_a_server_may_preload_a_library():
    from knoblab.server import Entry

    one = parse_spec(_with(server__binary={"path": "mariadbd", "preload": "jemalloc"}))
    assert one.target.binary == Entry("mariadbd", "jemalloc") and not one.target.servers
    two = parse_spec(_with(server__binary={"glibc": "mariadbd", "tc": {
        "path": "mariadbd", "preload": "tcmalloc"}}))
    assert two.target.servers == {"glibc": "mariadbd", "tc": "mariadbd with tcmalloc"}
    message = _error(_with(server__binary={"a": "mariadbd", "b": {"path": "x", "lib": "y"}}))
    assert "[server] binary.b: unknown key(s) lib" in message


def test_parse_spec_does_not_mutate_its_input():
    data = copy.deepcopy(MINIMAL)
    parse_spec(data)
    assert data == MINIMAL


# --------------------------------------------------------------------------- Spec.points


def _points(catalog, **changes):
    base, points, _ = parse_spec(_with(**changes)).points(catalog)
    return base, points


@pytest.mark.server
def test_points_normalize_values(catalog):
    base, points = _points(catalog, sweep__read_buffer_size=["128K", "64k", 262144, "1M"])
    assert base == {}
    assert [p.requested for p in points] == [
        {"read_buffer_size": "128K"}, {"read_buffer_size": "64k"},
        {"read_buffer_size": "262144"}, {"read_buffer_size": "1M"}]
    assert [p.config for p in points] == [
        {"read_buffer_size": "131072"}, {"read_buffer_size": "65536"},
        {"read_buffer_size": "262144"}, {"read_buffer_size": "1048576"}]


@pytest.mark.server
def test_points_boolean_requested_as_on_off(catalog):
    _, points = _points(catalog, sweep={"big_tables": [True, "off"]})
    assert [p.requested for p in points] == [{"big_tables": "ON"}, {"big_tables": "off"}]
    assert [p.config for p in points] == [{"big_tables": "ON"}, {"big_tables": "OFF"}]


@pytest.mark.server
def test_points_knob_name_is_canonical(catalog):
    _, points = _points(catalog, sweep={"Read-Buffer-Size": ["64K", "128K"]})
    assert points[0].config == {"read_buffer_size": "65536"}
    assert points[0].requested == {"read_buffer_size": "64K"}


@pytest.mark.parametrize("values", [["128K", 131072], ["128K", "128k"], ["1M", "1024K"],
                                    ["64K", "128K", "0128K"]])
@pytest.mark.server
def test_points_duplicates_after_normalisation(catalog, values):
    with pytest.raises(UserError) as info:
        _points(catalog, sweep__read_buffer_size=values)
    message = str(info.value)
    assert message.startswith("[sweep] read_buffer_size: ")
    assert "same value" in message
    assert "list each value once" in message


@pytest.mark.server
def test_points_out_of_range(catalog):
    with pytest.raises(UserError) as info:
        _points(catalog, sweep__read_buffer_size=["64K", "1K"])
    message = str(info.value)
    assert "read_buffer_size = '1K'" in message
    assert "out of range" in message
    assert "takes 8K to " in message


@pytest.mark.server
def test_points_minus_one(catalog):
    with pytest.raises(UserError, match=r"read_buffer_size = '-1': out of range"):
        _points(catalog, sweep__read_buffer_size=["-1", "64K"])


@pytest.mark.server
def test_points_unknown_knob_suggests(catalog):
    with pytest.raises(UserError) as info:
        _points(catalog, sweep={"read_bufer_size": ["64K", "128K"]})
    message = str(info.value)
    assert "'read_bufer_size' is not a setting of 10.11" in message
    assert "did you mean read_buffer_size" in message


@pytest.mark.server
def test_points_unknown_knob_in_server_config(catalog):
    with pytest.raises(UserError, match="'sort_bufer_size' is not a setting.*sort_buffer_size"):
        _points(catalog, server__config={"sort_bufer_size": "2M"})


@pytest.mark.server
def test_points_bad_value_in_server_config(catalog):
    with pytest.raises(UserError, match="sort_buffer_size = '12Q'"):
        _points(catalog, server__config={"sort_buffer_size": "12Q"})


@pytest.mark.server
def test_points_base_config_normalized(catalog):
    base, points = _points(catalog, server__config={"sort_buffer_size": "2M",
                                                    "innodb_flush_method": "o_direct"})
    assert base == {"sort_buffer_size": str(2 << 20), "innodb_flush_method": "O_DIRECT"}
    assert len(points) == 2


@pytest.mark.parametrize("config_name", ["read_buffer_size", "READ-BUFFER-SIZE"])
@pytest.mark.server
def test_points_knob_in_config_and_sweep(catalog, config_name):
    with pytest.raises(UserError) as info:
        _points(catalog, server__config={config_name: "64K"})
    assert str(info.value) == ("read_buffer_size is both in [server.config] and [sweep]; "
                               "keep one")


@pytest.mark.server
def test_points_two_knob_grid(catalog):
    _, points = _points(catalog, sweep={"read_buffer_size": ["64K", "128K", "256K"],
                                        "sort_buffer_size": ["1M", "2M"]})
    assert len(points) == 6
    assert [(p.requested["read_buffer_size"], p.requested["sort_buffer_size"])
            for p in points] == [("64K", "1M"), ("64K", "2M"), ("128K", "1M"), ("128K", "2M"),
                                 ("256K", "1M"), ("256K", "2M")]
    assert points[3].config == {"read_buffer_size": "131072", "sort_buffer_size": "2097152"}
    assert len({tuple(sorted(p.config.items())) for p in points}) == 6


@pytest.mark.server
def test_points_second_knob_error_is_reported(catalog):
    with pytest.raises(UserError, match="sort_buffer_size = '12Q'"):
        _points(catalog, sweep={"read_buffer_size": ["64K", "128K"],
                                "sort_buffer_size": ["1M", "12Q"]})


# --------------------------------------------------------------------------- load_spec


def test_load_spec_missing_file(tmp_path):
    path = tmp_path / "nope.toml"
    with pytest.raises(UserError) as info:
        load_spec(path)
    assert str(info.value) == f"cannot read spec {path}: No such file or directory"


def test_load_spec_directory(tmp_path):
    with pytest.raises(UserError, match="cannot read spec .*Is a directory"):
        load_spec(tmp_path)


def test_load_spec_path_through_a_file(tmp_path):
    (tmp_path / "plain").write_text("")
    path = tmp_path / "plain" / "spec.toml"
    with pytest.raises(UserError) as info:
        load_spec(path)
    assert str(info.value) == f"cannot read spec {path}: Not a directory"


@pytest.mark.parametrize("text", ["sweep = [\n", "[workload\nsql = 1", "a = 1\na = 2\n",
                                  "name = 'unterminated\n", "= 3"])
def test_load_spec_invalid_toml_is_one_line(tmp_path, text):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(UserError) as info:
        load_spec(path)
    message = str(info.value)
    assert message.startswith(f"{path}: invalid TOML: ")
    assert "\n" not in message
    assert "(at " in message  # says where: "(at line 1, column 9)" or "(at end of document)"


def test_load_spec_valid_file(tmp_path):
    path = tmp_path / "my-scan.toml"
    text = ('[dataset]\nrows = 1000\n[workload]\nsql = "SELECT 1"\n'
            '[sweep]\nread_buffer_size = ["64K", "128K"]\n')
    path.write_text(text)
    spec = load_spec(path)
    assert spec.name == "my-scan"
    assert spec.source == text
    assert spec.sweep == {"read_buffer_size": ["64K", "128K"]}


def test_load_spec_errors_come_from_parse_spec(tmp_path):
    path = tmp_path / "typo.toml"
    path.write_text('[workload]\nrepetitons = 3\n')
    with pytest.raises(UserError, match="did you mean 'repetitions'"):
        load_spec(path)


def test_load_spec_not_utf8(tmp_path):
    # A Latin-1 "é" in a comment: a UnicodeDecodeError traceback today.
    path = tmp_path / "latin1.toml"
    path.write_bytes(b"# caf\xe9\nname = 'x'\n")
    with pytest.raises(UserError) as info:
        load_spec(path)
    assert str(path) in str(info.value)


def test_load_spec_integer_too_long(tmp_path):
    # tomllib raises a plain ValueError (Python's 4300-digit limit), not TOMLDecodeError.
    path = tmp_path / "huge.toml"
    path.write_text("[workload]\nrepetitions = 1" + "0" * 5000 + "\n")
    with pytest.raises(UserError) as info:
        load_spec(path)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)


# --------------------------------------------------------------------------- property

_scalars = st.one_of(st.text(max_size=12), st.integers(), st.floats(allow_nan=True),
                     st.booleans(),
                     st.sampled_from(["sandbox", "scan-table", "query", "warm", "cold", "MyISAM",
                                      "welch-log", "128K", "SELECT 1", "1G"]))
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20,
)


def _section(name):
    keys = SECTION_KEYS.get(name) or set().union(*WORKLOAD_KEYS.values())
    return st.one_of(st.dictionaries(st.sampled_from(sorted(keys)), _values, max_size=6), _values)


_arbitrary = st.dictionaries(st.one_of(st.sampled_from(sorted(TOP_KEYS)), st.text(max_size=8)),
                             _values, max_size=7)
_shaped = st.fixed_dictionaries({}, optional={
    "name": _values, "description": _values,
    "server": _section("server"), "dataset": _section("dataset"),
    "workload": _section("workload"), "statistics": _section("statistics"),
    "sweep": st.one_of(st.dictionaries(st.text(max_size=8), st.lists(_scalars, max_size=4),
                                       max_size=3), _values),
})


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_arbitrary, _shaped))
def test_parse_spec_raises_only_user_errors(data):
    try:
        spec = parse_spec(data)
    except UserError as exc:
        assert str(exc)
        return
    # Whatever was accepted has the types the rest of knoblab relies on.
    assert isinstance(spec.name, str)
    assert isinstance(spec.workload.repetitions, int) and spec.workload.repetitions >= 1
    if spec.workload.kind == "sysbench":
        assert spec.workload.steady is not None
        assert isinstance(spec.workload.threads, int) and spec.workload.threads >= 1
        return
    assert isinstance(spec.workload.sql, str) and spec.workload.sql.strip()
    assert spec.workload.cache in ("warm", "cold")
    assert isinstance(spec.base_config, dict)
    assert spec.sweep and all(isinstance(v, list) and (len(v) >= 2 or n in spec.too_few_values)
                              for n, v in spec.sweep.items())
    assert (spec.workload.data.rows is None) != (spec.workload.data.size_bytes is None)


def test_dataset_variants_are_sweepable_and_sliced(catalog):
    spec = parse_spec({
        "dataset": {"rows": 1000},
        "workload": {"sql": "SELECT 1"},
        "sweep": {"read_buffer_size": ["64K", "128K"], "engine": ["myisam", "Aria"],
                  "slack_type": ["VARCHAR(50)", "char(50)"]},
    })
    _, points, _ = spec.points(catalog)
    assert len(points) == 8
    assert all(set(p.config) == {"read_buffer_size"} for p in points)  # not server settings
    variants = {spec.workload.dataset(p.requested) for p in points}
    assert {(v.engine, v.slack_type) for v in variants} == {
        ("MyISAM", "VARCHAR(50)"), ("MyISAM", "CHAR(50)"), ("Aria", "VARCHAR(50)"),
        ("Aria", "CHAR(50)")}
    assert len({v.key for v in variants}) == 4  # one template each


def test_tie_follows_the_leader_and_is_validated(catalog):
    data = {"dataset": {"rows": 1000}, "workload": {"sql": "SELECT 1"},
            "sweep": {"tmp_table_size": ["1M", "16M"]},
            "tie": {"max_heap_table_size": "tmp_table_size"}}
    _, points, _ = parse_spec(data).points(catalog)
    assert [p.config["max_heap_table_size"] for p in points] == ["1048576", "16777216"]
    data["tie"] = {"max_heap_table_size": "sort_buffer_size"}
    with pytest.raises(UserError, match="leader must be swept"):
        parse_spec(data).points(catalog)
    data["tie"] = {"max_heap_table_size": 5}
    with pytest.raises(UserError, match=r"\[tie\]"):
        parse_spec(data)


@pytest.mark.parametrize(("written", "canonical"), [
    ("myisam", "MyISAM"), ("MYISAM", "MyISAM"), ("aria", "Aria"), ("innodb", "InnoDB"),
    (" InnoDB ", "InnoDB")])
def test_dataset_engine_any_case_stored_canonical(written, canonical):
    # MySQL's engine names are case-insensitive (ENGINE=myisam is MyISAM): so is [dataset].
    spec = parse_spec(_with(dataset__engine=written))
    assert spec.workload.data.engine == canonical
    assert spec.workload.data.key == parse_spec(_with(dataset__engine=canonical)) \
        .workload.data.key  # one template for one dataset, however it is spelled


@pytest.mark.parametrize(("written", "canonical"), [
    ("varchar(50)", "VARCHAR(50)"), ("Char(50)", "CHAR(50)"), ("VARCHAR (50)", "VARCHAR(50)")])
def test_dataset_slack_type_any_case_stored_canonical(written, canonical):
    assert parse_spec(_with(dataset__slack_type=written)).workload.data.slack_type \
        == canonical


def test_dataset_volatile_engine_any_case_says_why():
    message = _error(_with(dataset__engine="memory"))
    assert "emptied by every server start" in message
