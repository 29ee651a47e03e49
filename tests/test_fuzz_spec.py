"""Fuzzing the spec reader: whatever a spec holds, the answer is a Spec or a UserError.

`parse_spec` gets TOML-shaped data (tables of text, numbers, booleans, dates, arrays and
tables), biased towards the real sections, keys and values so that the fuzzer gets past the
first checks; `load_spec` gets arbitrary bytes (invalid TOML, bad UTF-8, NUL bytes). Neither
needs a server. Defects the fuzzer found are kept below, with their minimal examples, as
regression tests.
"""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from knoblab.errors import UserError
from knoblab.server import KINDS as TARGET_KINDS
from knoblab.spec import SECTION_KEYS, TOP_KEYS, Spec, load_spec, parse_spec
from knoblab.workloads import KINDS

# Files a script workload may name, relative to the spec's folder: named now (the strategies
# below name them), made while this module's tests run (`files`).
FILES = Path(tempfile.gettempdir()) / f"knoblab-fuzz-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module", autouse=True)
def files() -> Iterator[Path]:
    FILES.mkdir(mode=0o700)  # a new folder: never one someone else put there
    try:
        (FILES / "setup.sql").write_text("CREATE TABLE t (a INT)\n")
        (FILES / "body.sql").write_text("INSERT INTO t VALUES ({row})\n")
        (FILES / "latin1.sql").write_bytes(b"SELECT 'caf\xe9'\n")
        (FILES / "folder").mkdir()
        yield FILES
    finally:
        shutil.rmtree(FILES, ignore_errors=True)

KNOBS = ["read_buffer_size", "innodb_buffer_pool_size", "sort_buffer_size", "tmp_table_size",
         "max_heap_table_size", "innodb_flush_log_at_trx_commit", "long_query_time",
         "optimizer_switch", "innodb_buffer_pool_instances", "read_bufer_size", "threads",
         "rows", "engine", "slack_type", "binary", "sql", "size", "duration"]
TEXTS = ["", " ", "64K", "128K", "131072", "12Q", "-5M", "1.5.2G", "1G", "auto", "warm", "cold",
         "hot", "query", "sysbench", "script", "external", "sandbox", "junk", "scan-table",
         "MyISAM", "InnoDB", "VARCHAR(50)", "welch", "welch-log", "mann-whitney",
         "oltp_read_write", "pareto", "SELECT 1", "mariadbd", "/bin/true", "/nonexistent/mariadbd",
         "127.0.0.1", "/tmp/nosuch.sock", "root", "MYSQL_PWD",
         "~/.my.cnf", "~nosuchuser_knoblab/my.cnf", "setup.sql", "body.sql", "latin1.sql",
         "folder", "nosuch.sql", "a\x00b", "x\ny", "tmp_table_size", "ON", "OFF", "nan", "inf"]

_texts = st.one_of(st.sampled_from(TEXTS), st.text(max_size=10))
_scalars = st.one_of(
    _texts,
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([0, 1, 2, -1, 5, 1000, 65535, 65536, 10_000, 2**63 - 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.dates(), st.times(), st.datetimes(timezones=st.none() | st.just(dt.UTC)),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.one_of(st.sampled_from(KNOBS), _texts), inner,
                                            max_size=4)),
    max_leaves=12,
)

WORKLOAD_KEYS = {name: set(kind.keys) for name, kind in KINDS.items()}


_small = st.integers(min_value=1, max_value=8)
_ints = st.one_of(_small, _small, st.integers(min_value=-5, max_value=100_000),
                  st.sampled_from([0, 2**63 - 1, -(2**63)]))
_fractions = st.one_of(st.floats(0, 1), st.floats(allow_nan=True, allow_infinity=True))
_sizes = st.sampled_from(["64K", "128K", "1G", "16M", 131072, 8200,
                          "12Q", "-5M", "1.5.2G", "", -1, 0])
_knob_value = st.one_of(_sizes, _sizes, _sizes, _scalars)
_binary = st.one_of(
    st.sampled_from(["mariadbd", "/usr/sbin/mariadbd", "/bin/true", "", " ",
                     "~nosuchuser_knoblab/x"]),
    st.lists(st.sampled_from(["/usr/sbin/mariadbd", "/bin/true", "mysqld"]) | _scalars,
             max_size=3),
    st.dictionaries(st.sampled_from(["gcc", "icc", ""]) | _texts,
                    st.sampled_from(["/usr/sbin/mariadbd", "/bin/true"]) | _scalars,
                    max_size=3),
)
_files = st.sampled_from(["setup.sql", "body.sql", "latin1.sql", "folder", "nosuch.sql", "",
                          "\x00", "a\x00b", "/bin/true", str(FILES / "setup.sql")])

# Per section, the keys with plausible values (valid or near misses).
SANDBOX = {
    "binary": _binary,
    "config": st.dictionaries(st.sampled_from(KNOBS) | _texts, _knob_value, max_size=3),
    "allow_durability_tradeoff": st.booleans(),
    "memory_budget": _sizes,
}
EXTERNAL = {
    "host": st.sampled_from(["127.0.0.1", "localhost", "", "a" * 70]),
    "port": st.sampled_from([0, 1, 3306, 65535, 65536, -1]),
    "socket": st.sampled_from(["/tmp/nosuch.sock", "", "a\x00b"]),
    "user": st.sampled_from(["root", "nobody_knoblab", ""]),
    "password_env": st.sampled_from(["MYSQL_PWD", "", "a\x00b"]),
    "option_file": st.sampled_from([
        "~/.my.cnf", "~nosuchuser_knoblab/my.cnf", "/nonexistent/my.cnf", "", "a\x00b",
        str(FILES / "setup.sql"), str(FILES / "folder")]),
    "database": st.sampled_from(["knoblab", "knoblab_bench", "", "my-data", "MySQL", "a" * 70,
                                 "a\x00b"]),
}
DATASET = {
    "kind": st.sampled_from(["scan-table", "other"]),
    "rows": _ints,
    "size": _sizes,
    "engine": st.sampled_from(["MyISAM", "Aria", "InnoDB", "MEMORY", "myisam", "x"]),
    "slack_type": st.sampled_from(["VARCHAR(50)", "CHAR(50)", "TEXT"]),
    "index": st.booleans(),
}
COMMON = {"repetitions": _ints, "timeout": st.one_of(_ints, _fractions)}
WORKLOAD = {
    "query": {**COMMON, "sql": st.sampled_from(["SELECT COUNT(*) FROM dt2", "", " "]),
              "cache": st.sampled_from(["warm", "cold", "hot"]), "timed_runs": _ints},
    "sysbench": {
        **COMMON, "test": st.sampled_from(["oltp_read_write", "oltp_raed_write", "bulk_insert"]),
        "threads": _ints, "tables": _ints, "table_size": _ints, "duration": _ints,
        "rand_type": st.sampled_from(["uniform", "pareto", "zipfian"]), "rate": _ints,
        "percentile": st.sampled_from([1, 95, 99, 100, 0, 101]), "window": _ints,
        "warmup": st.one_of(st.just("auto"), _ints, _texts), "stall_fraction": _fractions,
        "options": st.dictionaries(st.sampled_from(["range_size", "threads", "db-ps-mode"])
                                   | _texts, _scalars, max_size=3),
    },
    "script": {**COMMON, "setup": st.sampled_from(["CREATE TABLE t (a INT)", ""]),
               "body": st.sampled_from(["INSERT INTO t VALUES ({row})", ""]),
               "setup_file": _files, "body_file": _files, "connections": _ints,
               "iterations": _ints, "transaction": _ints},
}
STATISTICS = {
    "min_effect": _fractions, "alpha": _fractions, "confidence": _fractions, "seed": _ints,
    "test": st.sampled_from(["welch-log", "welch", "mann-whitney", "t"]),
}
SWEEPABLE_EXTRA = {"query": ["rows", "engine", "slack_type"], "sysbench": ["threads"],
                   "script": []}


def _some(draw: st.DrawFn, fields: dict[str, st.SearchStrategy[Any]], known: set[str],
          most: int = 3) -> dict[str, Any]:
    """Some of the section's keys with plausible values; keys spec.py knows that this file
    does not (added since) are drawn too, with arbitrary values."""
    pool = dict(fields)
    if draw(st.integers(0, 3)) == 0:
        for key in known - set(pool) - {"kind"}:
            pool[key] = _values
    names = draw(st.lists(st.sampled_from(sorted(pool)), unique=True, max_size=most))
    return {name: draw(pool[name]) for name in names}


@st.composite
def _specs(draw: st.DrawFn) -> dict[str, Any]:
    """A spec close to a valid one (often valid), then at most one mutation: a value replaced
    by anything, a junk key, a section dropped or replaced by a single value."""
    kind = draw(st.sampled_from(["query", "query", "sysbench", "script"]))
    data: dict[str, Any] = {}
    workload = _some(draw, WORKLOAD[kind], WORKLOAD_KEYS.get(kind, set()))
    if kind != "query" or draw(st.booleans()):
        workload["kind"] = kind
    if kind == "query":
        workload.setdefault("sql", "SELECT COUNT(*) FROM dt2")
        data["dataset"] = {"rows": draw(_small), **_some(draw, DATASET, SECTION_KEYS["dataset"],
                                                         most=2)}
    elif kind == "script":
        workload.setdefault("body", "INSERT INTO t VALUES ({row})")
    data["workload"] = workload

    server_kind = draw(st.sampled_from(["sandbox", "sandbox", "external", None]))
    fields = EXTERNAL if server_kind == "external" else SANDBOX
    server = _some(draw, fields, SECTION_KEYS["server"] - set(SANDBOX) - set(EXTERNAL) - {
        "password"})
    if server_kind is not None:
        server["kind"] = server_kind
    if server or draw(st.booleans()):
        data["server"] = server
    if draw(st.booleans()):
        data["statistics"] = _some(draw, STATISTICS, SECTION_KEYS["statistics"])

    knobs = st.sampled_from(KNOBS[:9] + SWEEPABLE_EXTRA[kind])
    if draw(st.booleans()):
        data["sweep"] = draw(st.dictionaries(knobs, st.lists(_knob_value, min_size=2,
                                                                max_size=4),
                                             min_size=1, max_size=2))
        if draw(st.integers(0, 4)) == 0:
            data["tie"] = draw(st.dictionaries(knobs, knobs, max_size=1))
    else:
        data["step"] = draw(st.lists(st.dictionaries(knobs, _knob_value, min_size=1,
                                                     max_size=2), min_size=1, max_size=3))
        if draw(st.booleans()):
            data["steps"] = {"one_at_a_time": draw(st.booleans())}
    if draw(st.booleans()):
        data["name"] = draw(_texts)

    mutation = draw(st.sampled_from(["none", "none", "value", "key", "drop", "scalar"]))
    sections = [k for k, v in data.items() if isinstance(v, dict)]
    if mutation == "value":
        where = draw(st.sampled_from(sorted(data)))
        if isinstance(data[where], dict) and data[where]:
            key = draw(st.sampled_from(sorted(data[where])))
            data[where][key] = draw(_values)
        elif isinstance(data[where], list) and data[where]:
            data[where][draw(st.integers(0, len(data[where]) - 1))] = draw(_values)
        else:
            data[where] = draw(_values)
    elif mutation == "key":
        target = draw(st.sampled_from([data, *(data[k] for k in sections)]))
        target[draw(st.sampled_from(sorted(TOP_KEYS | {"kind", "password", "sql", "steps"}))
                    | _texts)] = draw(_values)
    elif mutation == "drop":
        del data[draw(st.sampled_from(sorted(data)))]
    elif mutation == "scalar" and sections:
        data[draw(st.sampled_from(sections))] = draw(_scalars)
    return data


_arbitrary = st.dictionaries(st.sampled_from(sorted(TOP_KEYS)) | _texts, _values, max_size=6)


def _check(data: dict[str, Any]) -> None:
    try:
        spec = parse_spec(data, source="fuzz", base_dir=FILES)
    except UserError as exc:
        message = str(exc)
        assert message.strip(), "a UserError must say what is wrong"
        return
    assert isinstance(spec, Spec)
    assert isinstance(spec.name, str)
    rounds = spec.workload.rounds
    assert rounds.most >= 1 and (rounds.fixed is not None or 2 <= rounds.floor <= rounds.ceiling)
    assert spec.workload.kind in ("query", "sysbench", "script")
    assert bool(spec.steps) != bool(spec.sweep), "either a sweep or steps"
    # fewer than two values: refused by Spec.points, once the name is known to be a setting
    assert all(isinstance(v, list) and (len(v) >= 2 or n in spec.too_few_values)
               for n, v in spec.sweep.items())
    assert all(isinstance(step, dict) and step for step in spec.steps)
    target = spec.target
    assert type(target) is TARGET_KINDS[target.kind]
    binary = getattr(target, "binary", None)  # a sandbox's: a path, and what it preloads
    assert binary is None or (isinstance(binary.path, str) and binary.path.strip()
                              and (binary.preload is None or binary.preload.strip()))
    assert not (binary and target.servers)
    assert all(isinstance(v, str) for v in target.servers.values())
    assert target.endpoint is None or binary is None


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(_specs(), _specs(), _specs(), _arbitrary))
@example({"workload": {"kind": "script", "body": "SELECT 1", "setup_file": "latin1.sql"},
          "sweep": {"read_buffer_size": [1, 2]}})
@example({"step": [{}], "sweep": {"a": [1, 2]}})
@example({"server": {"binary": {"a": "x", "b": "x"}}, "sweep": {"a": [1, 2]}})
@example({"server": {"kind": "external", "port": True}, "sweep": {"a": [1, 2]}})
def test_parse_spec_returns_a_spec_or_a_user_error(data):
    _check(data)


# --------------------------------------------------------------------------- found defects

# The minimal examples Hypothesis once shrank to, kept as regression tests.
@pytest.mark.parametrize("data", [
    pytest.param({"workload": {"kind": "sysbench"},
                  "server": {"option_file": "~nosuchuser_knoblab/my.cnf", "kind": "external"},
                  "step": [{"read_buffer_size": "64K"}]},
                 id="option-file-unknown-home"),
    pytest.param({"workload": {"setup_file": "\x00", "kind": "script",
                               "body": "INSERT INTO t VALUES ({row})"},
                  "server": {"kind": "sandbox"}, "step": [{"read_buffer_size": "64K"}]},
                 id="setup-file-nul"),
    pytest.param({"workload": {"kind": "script", "setup": "CREATE TABLE t (a INT)",
                               "body_file": "\x00"}, "step": [{"read_buffer_size": "64K"}]},
                 id="body-file-nul"),
])
def test_found_defects_raise_user_errors(data):
    with pytest.raises(UserError):
        parse_spec(data, base_dir=FILES)


# --------------------------------------------------------------------------- files

_toml_like = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200).map(str.encode),
    st.lists(st.sampled_from([
        b"[sweep]\n", b"read_buffer_size = [\"64K\", \"128K\"]\n", b"[workload]\n",
        b"kind = \"script\"\n", b"setup_file = \"setup.sql\"\n", b"body = \"SELECT 1\"\n",
        b"[[step]]\n", b"x = 1\n", b"[dataset]\nrows = 1000\n", b"\xff", b"\x00", b"\"",
        b"= ", b"[", b"]", b"{", b"}", b"\n", b"1" * 40, b"caf\xc3\xa9", b"caf\xe9",
        b"\\u0000", b"1979-05-27T07:32:00Z", b"nan", b"inf", b"0x", b"[server]\n",
        b"binary = {a = \"x\", b = \"y\"}\n",
    ]), max_size=14).map(b"".join),
)


@settings(max_examples=150, deadline=None)
@given(_toml_like)
@example(b"\xff\xfe[sweep]\n")
@example(b"a = 1" + b"0" * 5000)
@example(b"\x00")
def test_load_spec_on_arbitrary_bytes(content):
    path = FILES / "fuzz.toml"
    path.write_bytes(content)
    try:
        spec = load_spec(path)
    except UserError as exc:
        assert str(exc).strip()
        return
    assert isinstance(spec, Spec)
    assert spec.name == "fuzz" or "name" in spec.source
