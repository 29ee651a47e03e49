"""Fuzzing the spec reader: whatever a spec holds, the answer is a Spec or a UserError.

`parse_spec` gets TOML-shaped data (tables of text, numbers, booleans, dates, arrays and
tables), biased towards the real sections, keys and values so that the fuzzer gets past the
first checks; `load_spec` gets arbitrary bytes (invalid TOML, bad UTF-8, NUL bytes). Neither
needs a server. Defects the fuzzer found are kept below as strict xfails with their minimal
examples, and recognised (not hidden) in the property so it keeps guarding everything else.
"""

from __future__ import annotations

import datetime as dt
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from knoblab.errors import UserError
from knoblab.spec import SECTION_KEYS, TOP_KEYS, WORKLOAD_KEYS, Spec, load_spec, parse_spec

# Files a script workload may name, relative to the spec's folder.
FILES = Path(tempfile.mkdtemp(prefix="knoblab-fuzz-"))
(FILES / "setup.sql").write_text("CREATE TABLE t (a INT)\n")
(FILES / "body.sql").write_text("INSERT INTO t VALUES ({row})\n")
(FILES / "latin1.sql").write_bytes(b"SELECT 'caf\xe9'\n")
(FILES / "folder").mkdir()

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


def _table(keys: set[str] | list[str], special: dict[str, st.SearchStrategy] | None = None
           ) -> st.SearchStrategy[dict[str, Any]]:
    """A table with the section's real keys (and the odd junk key), values from `special`."""
    special = special or {}
    key = st.one_of(st.sampled_from(sorted(keys)), st.sampled_from(sorted(keys)), _texts)
    return st.dictionaries(key, _values, max_size=6).flatmap(
        lambda d: st.fixed_dictionaries(
            {k: special.get(k, st.just(v)) for k, v in d.items()}))


_knob_table = st.dictionaries(st.sampled_from(KNOBS) | _texts, _scalars, max_size=4)
_binary = st.one_of(
    st.sampled_from(["mariadbd", "/usr/sbin/mariadbd", "/bin/true", "", "~nosuchuser_knoblab/x"]),
    st.lists(_texts, max_size=3),
    st.dictionaries(_texts, _texts, max_size=3),
    _values,
)
_server = _table(SECTION_KEYS["server"], {
    "kind": st.sampled_from(["sandbox", "external", "junk", ""]) | _scalars,
    "binary": _binary,
    "config": st.one_of(_knob_table, _values),
    "port": st.sampled_from([0, 1, 3306, 65535, 65536, -1]) | _scalars,
})
_workload = _table(set().union(*WORKLOAD_KEYS.values()), {
    "kind": st.sampled_from(["query", "sysbench", "script", "external", "junk"]) | _scalars,
    "options": st.one_of(st.dictionaries(_texts, _scalars, max_size=3), _values),
    "repetitions": st.sampled_from([0, 1, 5, 10_001]) | _scalars,
})
_good_sweep = st.dictionaries(st.sampled_from(KNOBS), st.lists(_scalars, min_size=2, max_size=4),
                              min_size=1, max_size=3)
_sweep = st.one_of(_good_sweep, _good_sweep, _values)
_good_steps = st.lists(st.dictionaries(st.sampled_from(KNOBS), _scalars, min_size=1, max_size=3),
                       min_size=1, max_size=3)
_steps = st.one_of(_good_steps, _good_steps, st.lists(_knob_table, max_size=3), _values)

_sections = {
    "name": _values, "description": _values,
    "server": st.one_of(_server, _server, _values),
    "dataset": st.one_of(_table(SECTION_KEYS["dataset"]), _values),
    "workload": st.one_of(_workload, _workload, _values),
    "statistics": st.one_of(_table(SECTION_KEYS["statistics"]), _values),
    "tie": st.one_of(st.dictionaries(st.sampled_from(KNOBS), st.sampled_from(KNOBS)), _values),
}
# Mostly one experiment or the other (so that the later checks are reached), sometimes both.
_swept = st.fixed_dictionaries({"sweep": _sweep}, optional=_sections)
_stepped = st.fixed_dictionaries({"step": _steps}, optional={
    **_sections, "steps": st.one_of(_table(SECTION_KEYS["steps"]), _values)})
_both = st.fixed_dictionaries({}, optional={
    **_sections, "sweep": _sweep, "step": _steps,
    "steps": st.one_of(_table(SECTION_KEYS["steps"]), _values)})
_arbitrary = st.dictionaries(st.sampled_from(sorted(TOP_KEYS)) | _texts, _values, max_size=6)


def _known_defect(exc: BaseException) -> bool:
    """Exceptions of the defects pinned by the xfail tests below (reported, not yet fixed)."""
    text = str(exc)
    return (isinstance(exc, RuntimeError) and "home directory" in text) or \
        (isinstance(exc, ValueError) and "null byte" in text)


def _check(data: dict[str, Any]) -> None:
    try:
        spec = parse_spec(data, source="fuzz", base_dir=FILES)
    except UserError as exc:
        message = str(exc)
        assert message.strip(), "a UserError must say what is wrong"
        return
    except (RuntimeError, ValueError) as exc:
        if _known_defect(exc):
            return
        raise
    assert isinstance(spec, Spec)
    assert isinstance(spec.name, str)
    assert isinstance(spec.repetitions, int) and spec.repetitions >= 1
    assert spec.kind in ("query", "sysbench", "script")
    assert bool(spec.steps) != bool(spec.sweep), "either a sweep or steps"
    assert all(isinstance(v, list) and len(v) >= 2 for v in spec.sweep.values())
    assert all(isinstance(step, dict) and step for step in spec.steps)
    assert spec.binary is None or (isinstance(spec.binary, str) and spec.binary.strip())
    assert not (spec.binary and spec.servers)
    assert all(isinstance(v, str) for v in spec.servers.values())
    assert spec.external is None or spec.binary is None


@settings(max_examples=600, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(_swept, _stepped, _both, _arbitrary))
@example({"workload": {"kind": "script", "body": "SELECT 1", "setup_file": "latin1.sql"},
          "sweep": {"read_buffer_size": [1, 2]}})
@example({"step": [{}], "sweep": {"a": [1, 2]}})
@example({"server": {"binary": {"a": "x", "b": "x"}}, "sweep": {"a": [1, 2]}})
@example({"server": {"kind": "external", "port": True}, "sweep": {"a": [1, 2]}})
def test_parse_spec_returns_a_spec_or_a_user_error(data):
    _check(data)


# --------------------------------------------------------------------------- found defects

SWEEP = {"read_buffer_size": ["64K", "128K"]}


@pytest.mark.parametrize("data", [
    pytest.param({"server": {"kind": "external", "option_file": "~nosuchuser_knoblab/my.cnf"},
                  "dataset": {"rows": 1}, "workload": {"sql": "SELECT 1"}, "sweep": SWEEP},
                 id="option-file-unknown-home",
                 marks=pytest.mark.xfail(strict=True, reason=(
                     "RuntimeError: Could not determine home directory. (Path.expanduser "
                     "in spec._external)"))),
    pytest.param({"workload": {"kind": "script", "setup_file": "\x00", "body": "SELECT 1"},
                  "sweep": SWEEP},
                 id="setup-file-nul",
                 marks=pytest.mark.xfail(strict=True, reason=(
                     "ValueError: embedded null byte (Path.read_text in "
                     "spec._script_workload)"))),
    pytest.param({"workload": {"kind": "script", "setup": "CREATE TABLE t (a INT)",
                               "body_file": "\x00"}, "sweep": SWEEP},
                 id="body-file-nul",
                 marks=pytest.mark.xfail(strict=True, reason=(
                     "ValueError: embedded null byte (Path.read_text in "
                     "spec._script_workload)"))),
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


@settings(max_examples=300, deadline=None)
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
    except (RuntimeError, ValueError) as exc:
        if _known_defect(exc):
            return
        raise
    assert isinstance(spec, Spec)
    assert spec.name == "fuzz" or "name" in spec.source
