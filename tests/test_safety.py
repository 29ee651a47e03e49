"""Safety before speed: durability trade-offs need consent, memory must fit, refused up front."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest

from knoblab.catalog import Catalog, Knob
from knoblab.errors import UserError
from knoblab.safety import (
    check,
    durability_costs,
    estimate_memory,
    format_size_rounded,
    safety_class,
)


def _knob(name: str, default: str) -> Knob:
    return Knob(name=name, type="BIGINT UNSIGNED", scope="GLOBAL", default=default,
                minimum=0, maximum=2**64 - 1, block_size=None, choices=(), dynamic=True,
                startup_option=True)


CATALOG = Catalog("10.11.19-MariaDB", {k.name: k for k in [
    _knob("innodb_buffer_pool_size", str(128 << 20)), _knob("key_buffer_size", str(128 << 20)),
    _knob("sort_buffer_size", str(2 << 20)), _knob("read_buffer_size", str(128 << 10)),
    _knob("tmp_table_size", str(16 << 20)), _knob("max_heap_table_size", str(16 << 20)),
    _knob("innodb_flush_log_at_trx_commit", "1"),
]})


def test_classes():
    assert safety_class("innodb_flush_log_at_trx_commit") == "durability"
    assert safety_class("sync_binlog") == "durability"
    assert safety_class("innodb_buffer_pool_size") == "resource"
    assert safety_class("read_buffer_size") == "resource"
    assert safety_class("optimizer_search_depth") == "safe"


def test_durability_costs_depend_on_the_value():
    assert durability_costs({"innodb_flush_log_at_trx_commit": "1"}) == {}
    assert durability_costs({"innodb_flush_log_at_trx_commit": "3"}) == {}
    assert "last second" in durability_costs({"innodb_flush_log_at_trx_commit": "2"})[
        "innodb_flush_log_at_trx_commit"]
    assert set(durability_costs({"sync_binlog": "0", "innodb_doublewrite": "OFF",
                                 "innodb_flush_method": "nosync",
                                 "innodb_flush_method_x": "nosync"})) == {
        "sync_binlog", "innodb_doublewrite", "innodb_flush_method"}


def test_memory_estimate_by_hand():
    estimate = estimate_memory({"innodb_buffer_pool_size": str(1 << 30),
                                "sort_buffer_size": str(4 << 20)}, CATALOG, connections=10)
    per_connection = (4 << 20) + (128 << 10) + (16 << 20)  # sort + read + temporary table
    expected = (1 << 30) + (128 << 20) + 10 * per_connection + (128 << 20)
    assert estimate.total == expected
    assert estimate.parts[0] == ("innodb_buffer_pool_size", 1 << 30)  # largest first
    assert "10 connections" in estimate.describe()


def test_check_refuses_durability_without_consent_and_allows_with_it():
    points = [({"innodb_flush_log_at_trx_commit": "0"}, {"innodb_flush_log_at_trx_commit": "0"})]
    with pytest.raises(UserError, match="allow_durability_tradeoff = true") as info:
        check(points, {}, CATALOG, connections=lambda r: 2, allow_durability_tradeoff=False,
              memory_budget=None)
    assert "innodb_flush_log_at_trx_commit=0" in str(info.value)
    check(points, {}, CATALOG, connections=lambda r: 2, allow_durability_tradeoff=True,
          memory_budget=None)


def test_check_refuses_over_budget_with_the_breakdown():
    points = [({"innodb_buffer_pool_size": "64M"}, {"innodb_buffer_pool_size": str(64 << 20)}),
              ({"innodb_buffer_pool_size": "2G"}, {"innodb_buffer_pool_size": str(2 << 30)})]
    with pytest.raises(UserError) as info:
        check(points, {}, CATALOG, connections=lambda r: 2, allow_durability_tradeoff=False,
              memory_budget=1 << 30)
    message = str(info.value)
    assert message.startswith("innodb_buffer_pool_size=2G: estimated memory")
    assert "over the budget of 1G ([server] memory_budget)" in message
    assert "innodb_buffer_pool_size 2G" in message and "server baseline 128M" in message


def test_format_size_rounded():
    assert format_size_rounded(1 << 30) == "1G"
    assert format_size_rounded(int(1.5 * (1 << 30)) + 1) == "1.5G"
    assert format_size_rounded(512) == "512B"


SPEC = """\
[server]
{server}
[dataset]
rows = 1000
[workload]
sql = "SELECT 1"
repetitions = 1
[sweep]
{sweep}
"""


@pytest.mark.server
@pytest.mark.parametrize(("server", "sweep", "expected"), [
    ("", 'innodb_flush_log_at_trx_commit = [1, 2]', "gives up durability"),
    ('memory_budget = "512M"', 'innodb_buffer_pool_size = ["128M", "1G"]', "over the budget"),
])
def test_refused_before_any_server_starts(knoblab_home, tmp_path, server, sweep, expected):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC.format(server=server, sweep=sweep))
    sandboxes = knoblab_home / "sandboxes"
    before = set(sandboxes.iterdir()) if sandboxes.exists() else set()
    env = {**os.environ, "KNOBLAB_HOME": str(knoblab_home)}
    out = subprocess.run([sys.executable, "-m", "knoblab.cli", "--store",
                          f"sqlite:///{tmp_path / 's.sqlite'}", "run", str(spec)],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and expected in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    after = set(sandboxes.iterdir()) if sandboxes.exists() else set()
    assert after <= before  # no sandbox was made for this run
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0


@pytest.mark.server
def test_durability_trade_off_runs_with_consent(knoblab_home, tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC.format(server="allow_durability_tradeoff = true",
                                sweep="innodb_flush_log_at_trx_commit = [1, 2]"))
    env = {**os.environ, "KNOBLAB_HOME": str(knoblab_home)}
    out = subprocess.run([sys.executable, "-m", "knoblab.cli", "--store",
                          f"sqlite:///{tmp_path / 's.sqlite'}", "run", str(spec), "--out",
                          str(tmp_path / "out")],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    # The gain, if any, is labelled on its own line, against the durable value.
    assert "bought by giving up durability" in out.stdout
    assert "innodb_flush_log_at_trx_commit = 2" in out.stdout
