"""A placebo searched on a real server whose first load after a start is slow (a cold
InnoDB buffer pool): the trials' gains centre on zero, and nothing is recommended. Were the
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
from tests.test_tune import Quiet

pytestmark = pytest.mark.server

# About 50 MB of InnoDB rows, read with O_DIRECT: a scan right after a start reads them from
# disk, a scan after it finds them in the buffer pool. query_prealloc_size cannot matter to it.
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
query_prealloc_size = ["16K", "4M"]
'''


def test_a_placebo_on_a_cold_buffer_pool_scores_zero_and_is_not_recommended(
        tmp_path: Path, knoblab_home: Path) -> None:
    spec = parse_spec(tomllib.loads(SPEC), source=SPEC)
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    result = tune(spec, store, knoblab_home, Quiet())
    ratios = [r for t in result.trials if t.state in ("scored", "pruned") for r in t.ratios]
    assert len(ratios) >= 4, [t.state for t in result.trials]
    # Each round compares two warm measurements: the cold start's cost (a scan from disk
    # instead of the buffer pool: about 7 times as long here, a log-ratio of 2) is in
    # neither. What is left is the machine's noise, wide for one ratio of two short runs on
    # a shared VM, centred on zero.
    assert abs(statistics.fmean(ratios)) < 0.25, ratios
    assert max(abs(r) for r in ratios) < 1.0, ratios
    assert result.recommended is None and recommend.settings(result) == {}
