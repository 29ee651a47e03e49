"""Checks that used to let wrong things through: each is refused or said before a run, from
the user's side (a spec as written, the command line)."""

from __future__ import annotations

import tomllib

import pytest

from knoblab.errors import UserError
from knoblab.runner import check_settable
from knoblab.spec import parse_spec
from knoblab.workloads.timed import regime


def _spec(text: str):
    return parse_spec(tomllib.loads(text), source=text)


QUERY = '[dataset]\nrows = 1000\n[workload]\nsql = "{sql}"\n{extra}\n[sweep]\n' \
        'read_buffer_size = ["64K", "128K"]\n'


def test_a_table_where_a_value_belongs_is_refused():
    with pytest.raises(UserError, match=r"init_connect = \{'a': 1\}: a setting takes one value"):
        _spec("[server.config.init_connect]\na = 1\n" + QUERY.format(sql="SELECT 1", extra=""))


def test_a_memory_table_that_every_start_empties_is_refused():
    with pytest.raises(UserError, match="emptied by every server start"):
        _spec(QUERY.format(sql="SELECT 1", extra="").replace("rows = 1000",
                                                             'rows = 1000\nengine = "MEMORY"'))
    sweep = QUERY.format(sql="SELECT 1", extra="") + 'engine = ["MyISAM", "memory"]\n'
    with pytest.raises(UserError, match="emptied by every server start"):
        _spec(sweep)


def test_a_statement_that_changes_its_data_is_named_and_rebuilt_on_running_servers():
    spec = _spec(QUERY.format(sql="/* hi */ DELETE FROM dt2 WHERE grp < 10", extra=""))
    assert spec.workload.writes_data
    assert any("changes the data it runs on" in w for w in spec.workload.warnings)
    quiet = _spec(QUERY.format(sql="DELETE FROM dt2 WHERE grp < 10", extra='cache = "cold"'))
    assert quiet.workload.writes_data and not quiet.workload.warnings
    reading = _spec(QUERY.format(sql="SELECT COUNT(*) FROM dt2", extra=""))
    assert not reading.workload.writes_data and not reading.workload.warnings


def test_session_only_and_other_option_settings_are_refused(catalog):
    with pytest.raises(UserError, match="timestamp exists only within one connection"):
        check_settable(catalog, ["timestamp"])
    with pytest.raises(UserError, match=r"log_bin is set at start-up by another option \(log-bin"):
        check_settable(catalog, ["log_bin"])


@pytest.mark.parametrize(("cpu", "iowait", "io_bytes", "expected"), [
    (0.9, 0.0, 0, "CPU-bound"),
    (0.2, 0.3, 0, "I/O-bound"),
    (0.2, 0.0, 5e6, "I/O-bound"),
    (0.05, 0.0, 0, "waiting"),  # SLEEP, a lock, a client that sets the pace: not the disk
    (0.5, 0.0, 0, "mixed"),
])
def test_the_regime_needs_evidence_of_io_to_say_io_bound(cpu, iowait, io_bytes, expected):
    assert regime(cpu, iowait, io_bytes) == expected
