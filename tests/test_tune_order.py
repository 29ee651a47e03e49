"""A placebo searched on a real server whose first load after a start is slow (a cold
InnoDB buffer pool): every measurement compared is a warm one, no trial is scored by the
cold start's cost, and nothing is recommended. Were the
first measurement of a start compared with warm ones, as the order fell, every trial would
score the cold start's cost as the setting's effect."""

from __future__ import annotations

import statistics
import tomllib
from pathlib import Path

import pytest

from knoblab import recommend
from knoblab.search import tune
from knoblab.spec import parse_spec
from knoblab.store import Store
from knoblab.vocabulary import TrialState
from tests.test_tune import Quiet

pytestmark = pytest.mark.server

# About 50 MB of InnoDB rows, read with O_DIRECT: a scan right after a start reads them from
# disk (53 MB read, 7-9 times as long), a scan after it finds them in the buffer pool.
# net_retry_count only matters to a network read that was interrupted: not to this scan.
SPEC = '''
name = "placebo"

[server]
binary = "mariadbd"

[server.config]
innodb_buffer_pool_size = "256M"

[workload]
kind = "script"
setup = """
CREATE TABLE wide (id INT PRIMARY KEY, pad CHAR(220) NOT NULL) ENGINE=InnoDB;
INSERT INTO wide SELECT seq, REPEAT(CHAR(97 + seq % 26), 220) FROM seq_1_to_200000;
"""
body = "SELECT COUNT(*) FROM wide WHERE pad LIKE 'zz%';"
connections = 1
iterations = 1

[statistics]
seed = 1
# The suite keeps a core or more busy beside this test (its quiet-machine check is off in the
# tests), and a validation's false "better" at alpha 0.05 then came now and then: a placebo
# was once validated at 99.3% with 1.2 cores busy elsewhere. The bias this test is about, a
# cold start's scan costing 7 times a warm one, is far beyond a stricter level.
alpha = 0.01

[tune]
trials = 6
rounds = 2
max_rounds = 2
validate = 1
batch = 6

[tune.knobs]
net_retry_count = [1, 100000]
'''


@pytest.mark.long
def test_a_placebo_on_a_cold_buffer_pool_scores_zero_and_is_not_recommended(
        tmp_path: Path, knoblab_home: Path) -> None:
    spec = parse_spec(tomllib.loads(SPEC), source=SPEC)
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    result = tune(spec, store, knoblab_home, Quiet())
    ratios = [r for t in result.trials if t.state in ("scored", "pruned") for r in t.ratios]
    assert len(ratios) >= 4, [t.state for t in result.trials]
    # Every measurement compared, the baseline's and the candidates', found the table in the
    # buffer pool: the server read nothing from disk during it (a cold scan reads 53 MB).
    # Which one is the first after a start is the order's chance; none of them pays for it.
    runs = {run for t in result.trials for run in t.runs}
    measured = [m for run in runs for m in store.trials(run) if m.status == TrialState.DONE]
    assert len(measured) >= 2 * len(ratios), measured
    assert all(m.details["read_bytes"] < 5_000_000 for m in measured), \
        [m.details["read_bytes"] for m in measured]
    # The rest is the machine's noise, wide for one ratio of two 30-ms scans on a shared VM
    # (their times fall about 26 or 45 ms, a log-ratio of 0.5 either way; one of five was
    # 1.34 with four test workers on two cores); a trial scored against a cold scan would be
    # 2 off, and with that fault every trial is, one of its sides the first scan of a start.
    assert statistics.median(abs(r) for r in ratios) < 1.0, ratios
    assert result.recommended is None and recommend.settings(result) == {}
