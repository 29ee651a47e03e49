"""The registries a new kind is added to in one line: report formats (knoblab.report.exporters)
and targets (knoblab.server.KINDS). A format registered from here alone is written by
`knoblab report`; every target kind reads its own [server] keys and refuses the others."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest

from knoblab import cli
from knoblab import server as targets
from knoblab.errors import UserError
from knoblab.places import REPORT_MARK
from knoblab.report import exporters
from knoblab.report.document import Report
from knoblab.results import build_results
from knoblab.spec import parse_spec
from knoblab.store import Store

GOLDEN = Path(__file__).parent / "data" / "golden"

# ------------------------------------------------------------------------------ exporters


class _Tally:
    """A format of this test's own: what the run measured, one line."""

    name = "tally"
    file = "tally.txt"

    def export(self, report: Report) -> str | None:
        if report.results is None:  # a search's report has none
            return None
        return (f"{report.results.name}: {len(report.results.points)} points, "
                f"{len(report.trials)} measurements\n")


def test_a_format_registered_here_is_written_by_knoblab_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(exporters.EXPORTERS, _Tally.name, _Tally())
    store_file = tmp_path / "store.sqlite"
    shutil.copy(GOLDEN / "store.sqlite", store_file)
    store = Store(f"sqlite:///{store_file}")
    run = next(r for r in store.list_runs(limit=1000) if r["name"] == "golden-query-sweep")
    out = tmp_path / "out"
    command = ["--store", f"sqlite:///{store_file}", "report", run["id"], "--out", str(out)]

    assert cli.main(command) == 0
    points = len(build_results(store, run["id"]).points)
    assert (out / "tally.txt").read_text() == \
        f"golden-query-sweep: {points} points, {len(store.trials(run['id']))} measurements\n"
    printed = " ".join(capsys.readouterr().out.split())
    assert "recommended.cnf, measurements.csv, result.json, tally.txt)" in printed
    # Its file is one knoblab writes: a folder holding it (and no mark) is still a report's.
    (out / REPORT_MARK).unlink()
    assert cli.main(command) == 0


def test_every_format_writes_a_file_of_its_own() -> None:
    files = exporters.file_names()
    assert len(files) == len(set(files)) == len(exporters.EXPORTERS)
    assert all(name == exporter.name for name, exporter in exporters.EXPORTERS.items())
    assert files[0] == "report.html"  # the page is named first


# ------------------------------------------------------------------------------ targets

MINIMAL = {
    "dataset": {"rows": 1000},
    "workload": {"sql": "SELECT COUNT(*) FROM dt2"},
    "sweep": {"read_buffer_size": ["64K", "128K"]},
}
# A valid [server] section of each kind, beyond kind = "...".
SECTIONS: dict[str, dict[str, Any]] = {
    "sandbox": {"binary": "mariadbd"},
    "external": {"host": "127.0.0.1", "port": 3306, "user": "root", "database": "knoblab_b"},
}


def _spec(server: dict[str, Any]) -> Any:
    return parse_spec({**copy.deepcopy(MINIMAL), "server": server})


def _refusal(server: dict[str, Any]) -> str:
    with pytest.raises(UserError) as info:
        _spec(server)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_every_target_kind_has_a_section_here() -> None:
    assert set(SECTIONS) == set(targets.KINDS)
    assert targets.DEFAULT in targets.KINDS


@pytest.mark.parametrize("name", sorted(targets.KINDS))
def test_a_target_kind_reads_its_server_section(name: str) -> None:
    kind = targets.KINDS[name]
    assert set(SECTIONS[name]) <= set(kind.keys)
    target = _spec({"kind": name, **SECTIONS[name]}).target
    assert type(target) is kind and target.kind == name
    assert (target.endpoint is not None) == kind.running
    assert isinstance(target.servers, dict)


@pytest.mark.parametrize("name", sorted(targets.KINDS))
def test_a_target_kind_refuses_an_unknown_key_in_one_line(name: str) -> None:
    message = _refusal({"kind": name, **SECTIONS[name], "colour": "blue"})
    assert message.startswith("[server]: unknown key 'colour'")


@pytest.mark.parametrize("name", sorted(targets.KINDS))
def test_a_target_kind_refuses_another_kinds_keys_in_its_words(name: str) -> None:
    kind = targets.KINDS[name]
    for other in targets.KINDS.values():
        for key in set(other.keys) - set(kind.keys):
            value = SECTIONS[other.kind].get(key, "x")
            message = _refusal({"kind": name, **SECTIONS[name], key: value})
            assert message == kind.foreign_key(key, other.kind)


def test_an_unknown_target_kind_is_told_every_kind() -> None:
    message = _refusal({"kind": "cloud"})
    assert message.startswith("[server] kind = 'cloud': use ")
    assert all(f'"{name}" ({kind.described})' in message for name, kind in targets.KINDS.items())
