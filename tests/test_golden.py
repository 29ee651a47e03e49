"""Stored runs of every kind render the same report and results JSON as when they were recorded.

The store in tests/data/golden/ holds real runs of the specs beside it (a query sweep, a grid
sliced by data size with a tied setting, sysbench over thread counts, steps over a script on two
servers with one left out, a running server, sysbench steps). `knoblab report` must turn each
into exactly the recorded terminal report and results JSON: the reports users read and the
JSON their scripts parse do not change when the code behind them is restructured.

To record anew after a deliberate change of output (say why in the commit):
    KNOBLAB_RECORD_GOLDEN=1 .venv/bin/python -m pytest tests/test_golden.py
To re-create the store itself, run each spec of tests/data/golden/specs/ with
    knoblab --store sqlite:///tests/data/golden/store.sqlite run tests/data/golden/specs/X.toml
(external.toml needs the MariaDB on 127.0.0.1:3306).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from knoblab import cli
from knoblab.store import Store

GOLDEN = Path(__file__).parent / "data" / "golden"
RECORD = os.environ.get("KNOBLAB_RECORD_GOLDEN") == "1"


def _runs() -> list[tuple[str, str]]:
    store = Store(f"sqlite:///{GOLDEN / 'store.sqlite'}")
    return sorted((run["name"], run["id"]) for run in store.list_runs(limit=1000))


@pytest.mark.parametrize(("name", "run_id"), _runs())
def test_stored_run_renders_as_recorded(name: str, run_id: str, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    # A copy: reading a store must not need to write it, and the fixture stays untouched.
    store_file = tmp_path / "store.sqlite"
    shutil.copy(GOLDEN / "store.sqlite", store_file)
    out = tmp_path / "out"
    code = cli.main(["--store", f"sqlite:///{store_file}", "report", run_id, "--out", str(out)])
    printed = capsys.readouterr().out
    # The folder differs per test run; everything else is compared byte for byte.
    printed = printed.replace(str(out), "OUT")
    document = (out / "result.json").read_text()
    expected_text, expected_json = GOLDEN / f"{name}.txt", GOLDEN / f"{name}.json"
    if RECORD:
        expected_text.write_text(printed)
        expected_json.write_text(document)
    assert code == 0
    assert printed == expected_text.read_text()
    assert document == expected_json.read_text()
    result = json.loads(document)
    assert result["run_id"] == run_id and result["points"]
    assert list(out.glob("*.png")), "charts were written"


def test_every_kind_is_covered() -> None:
    """The fixture keeps a run of every kind the restructuring must preserve."""
    names = {name for name, _ in _runs()}
    assert names == {"golden-query-sweep", "golden-grid", "golden-sysbench",
                     "golden-steps-servers", "golden-external", "golden-sysbench-steps"}


def test_a_fixed_time_run_is_explained_per_transaction_not_by_its_volume(tmp_path: Path) -> None:
    """sysbench runs for a fixed time: a configuration that manages twice the transactions
    moves every per-query counter twice as far. Compared per transaction, those counters stay
    level, and what changed per unit of work (here the query cache step) is what is named."""
    from knoblab.results import build_results

    store_file = tmp_path / "store.sqlite"
    shutil.copy(GOLDEN / "store.sqlite", store_file)
    store = Store(f"sqlite:///{store_file}")
    run_id = dict(_runs())["golden-sysbench-steps"]
    named = {c.counter: c for e in build_results(store, run_id).explained_by
             for c in e.counters}
    volume = {"rows_read", "table_open_cache_hits", "resultset_metadata_skipped"}
    assert named and not volume & set(named)
    # What is named changed per transaction (handler_commit: 1 at steps 0-1, 0.776 at step 2,
    # where query cache hits never reach InnoDB); levels (qcache_free_blocks) are not named.
    assert all(len(set(c.per_point.values())) > 1 for c in named.values())
    assert not {"qcache_free_blocks", "qcache_queries_in_cache", "qcache_total_blocks"} & \
        set(named)
    assert "qcache_inserts" in named
    assert all("per transaction" in c.text for c in named.values()
               if not c.counter.endswith(("_written", "_read")))
