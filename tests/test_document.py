"""The report folder of `knoblab report`: for a stored run of every kind (the golden store),
report.html and report.md say what the results JSON says, measurements.csv holds every
measurement, recommended.cnf holds only measured changes, and a folder knoblab did not write
is never written into."""

from __future__ import annotations

import configparser
import csv
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from knoblab import cli
from knoblab.places import REPORT_MARK as MARK
from knoblab.report import definitions
from knoblab.store import Store
from knoblab.units import num

GOLDEN = Path(__file__).parent / "data" / "golden"


def _runs() -> list[tuple[str, str]]:
    store = Store(f"sqlite:///{GOLDEN / 'store.sqlite'}")
    return sorted((run["name"], run["id"]) for run in store.list_runs(limit=1000))


class _Page(HTMLParser):
    """The cells of every table, the sources of every image and stylesheet, the links, and
    the ids."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.sources: list[str] = []
        self.links: list[str] = []
        self.ids: set[str] = set()
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(str(found["id"]))
        if found.get("src") or (tag == "link" and found.get("href")):  # what a page fetches
            self.sources.append(str(found.get("src") or found["href"]))
        elif found.get("href"):
            self.links.append(str(found["href"]))
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


@pytest.fixture()
def store_url(tmp_path: Path) -> str:
    # A copy: the fixture stays untouched whatever the code under test does.
    shutil.copy(GOLDEN / "store.sqlite", tmp_path / "store.sqlite")
    return f"sqlite:///{tmp_path / 'store.sqlite'}"


def _report(store_url: str, run_id: str, out: Path) -> int:
    return cli.main(["--store", store_url, "report", run_id, "--out", str(out)])


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    """The report folder of every golden run, written once for the tests below."""
    folder = tmp_path_factory.mktemp("reports")
    shutil.copy(GOLDEN / "store.sqlite", folder / "store.sqlite")
    found = {}
    for name, run_id in _runs():
        assert _report(f"sqlite:///{folder / 'store.sqlite'}", run_id, folder / name) == 0
        found[run_id] = folder / name
    return found


@pytest.mark.parametrize(("name", "run_id"), _runs())
def test_the_report_of_every_kind_says_what_its_json_says(name: str, run_id: str,
                                                           reports: dict[str, Path]) -> None:
    out = reports[run_id]
    names = {p.name for p in out.iterdir()}
    assert {"report.html", "report.md", "measurements.csv", "recommended.cnf", "result.json",
            MARK} <= names
    result = json.loads((out / "result.json").read_text())
    html = (out / "report.html").read_text()
    page = _Page()
    page.feed(html)

    # The conclusion first, the sections in order, nothing fetched from anywhere.
    order = [html.index(f'id="{section}"') for section in
             ("conclusion", "results", "safety", "noise", "reproduce")]
    assert order == sorted(order)
    assert all(src.startswith("data:image/png;base64,") for src in page.sources)
    assert len(page.sources) == len(list(out.glob("*.png"))) >= 1
    # the only links: to the manual's definitions of the words its tables judge with
    base = definitions.manual_base()
    assert all(link.startswith(f"{base}{definitions.PAGE}#") for link in page.links), \
        page.links
    assert bool(page.links) == bool(base)
    assert result["conclusion"]["text"].split(";")[0].split(".")[0] in \
        html.replace("&#39;", "'").replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")

    # Every number of a point's level in the JSON is a cell of the page's tables.
    cells = {cell.strip() for table in page.tables for row in table for cell in row}
    text = " ".join(cells)
    centre = "mean" if result["objective"]["metric"] == "tps" else "median"
    for point in result["points"]:
        if point.get(centre) is not None and not result.get("steps"):
            assert num(point[centre]) in cells, (point["settings"], num(point[centre]))
    for table in result.get("steps") or []:
        for row in table["rows"]:
            if row.get("center") is not None:
                assert num(row["center"]) in text

    # The Markdown has the same tables and links the PNGs beside it.
    markdown = (out / "report.md").read_text()
    assert markdown.startswith(f"# {result['name']}")
    for png in out.glob("*.png"):
        assert f"]({png.name})" in markdown
    assert markdown.count("\n| ") >= sum(len(t) for t in page.tables)

    # Reproducibility: the spec as run, the server, the version.
    assert 'id="spec"' in html and result["name"] in html
    assert "knoblab" in {cell.strip() for cell in re.findall(r"<dt>([^<]*)</dt>", html)}


@pytest.mark.parametrize(("name", "run_id"), _runs())
def test_measurements_csv_holds_every_measurement_with_its_counters(
        name: str, run_id: str, reports: dict[str, Path]) -> None:
    with (reports[run_id] / "measurements.csv").open() as f:
        rows = list(csv.DictReader(f))
    trials = Store(f"sqlite:///{GOLDEN / 'store.sqlite'}").trials(run_id)
    assert len(rows) == len(trials)
    assert [float(r["value"]) for r in rows if r["state"] == "done"] == \
        [t.value for t in trials if t.status.value == "done"]
    columns = set(rows[0])
    assert {"point", "round", "order", "state", "value", "unit"} <= columns
    assert any(c.startswith("set.") for c in columns)
    assert any(c.startswith("status.") for c in columns) or \
        any(c.startswith("os.") for c in columns) or "tps" in rows[0]["unit"]


@pytest.mark.parametrize(("name", "run_id"), _runs())
def test_recommended_cnf_holds_only_the_recommended_changes(name: str, run_id: str,
                                                           reports: dict[str, Path]) -> None:
    text = (reports[run_id] / "recommended.cnf").read_text()
    result = json.loads((reports[run_id] / "result.json").read_text())
    parser = configparser.ConfigParser(allow_no_value=True, comment_prefixes=("#",))
    parser.read_string(text)
    assert parser.sections() == ["mysqld"]
    settings = dict(parser["mysqld"])
    steps = result["conclusion"].get("recommended_steps")
    if steps is not None:
        found = [step["settings"] for step in steps]
        wanted = set(found[0]) if found and all(f and f == found[0] for f in found) else set()
    else:
        # each slice's recommendation (result.json's conclusion), where it changes the
        # default (shown to help); set only when all agree
        slices = result["slices"]
        parts = result["conclusion"].get("by_slice") or [result["conclusion"]]
        chosen = [{k: v for k, v in p["config"].items() if k not in slices}
                  for part in parts for p in result["points"]
                  if p["settings"] == part["recommended"] and not p["is_default"]]
        agree = len(chosen) == len(parts) and all(c == chosen[0] for c in chosen)
        wanted = set(chosen[0]) if chosen and agree else set()
    assert set(settings) == wanted, text
    if not wanted:
        assert "Nothing is set here" in text
    else:
        assert text.index("# ") < text.index("[mysqld]")  # what it is, first


def test_a_folder_knoblab_did_not_write_is_left_alone(store_url: str, tmp_path: Path,
                                                      capsys) -> None:
    run_id = _runs()[0][1]
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("my notes")
    assert _report(store_url, run_id, folder) == 2
    err = capsys.readouterr().err
    assert "holds files knoblab did not write (notes.txt)" in err
    assert err.count("\n") == 1
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
    # a folder knoblab wrote is written again
    assert _report(store_url, run_id, tmp_path / "again") == 0
    assert _report(store_url, run_id, tmp_path / "again") == 0


def test_an_unwritable_folder_and_a_file_in_the_way_are_one_line(store_url: str,
                                                                 tmp_path: Path,
                                                                 capsys) -> None:
    run_id = _runs()[0][1]
    (tmp_path / "file").write_text("x")
    assert _report(store_url, run_id, tmp_path / "file") == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        code = _report(store_url, run_id, locked / "out")
        err = capsys.readouterr().err
        if code != 0:  # root writes anywhere
            assert code == 2 and "cannot write" in err and err.count("\n") == 1
    finally:
        locked.chmod(0o700)


def test_a_run_still_measured_is_reported_as_partial(store_url: str, tmp_path: Path,
                                                     capsys) -> None:
    store = Store(store_url)
    name, run_id = _runs()[0]
    store.set_status(run_id, "running")
    assert _report(store_url, run_id, tmp_path / "out") == 0
    capsys.readouterr()
    html = (tmp_path / "out" / "report.html").read_text()
    assert 'id="partial"' in html and "Partial: this run is running" in html
    assert "nothing is recommended yet" in (tmp_path / "out" / "recommended.cnf").read_text()


def test_latest_and_ambiguous_run_ids(store_url: str, tmp_path: Path, capsys) -> None:
    store = Store(store_url)
    newest = store.list_runs(limit=1)[0]["id"]
    assert _report(store_url, "latest", tmp_path / "out") == 0
    assert json.loads((tmp_path / "out" / "result.json").read_text())["run_id"] == newest
    capsys.readouterr()
    assert _report(store_url, "", tmp_path / "o2") == 2
    err = capsys.readouterr().err
    assert "is ambiguous" in err and err.count("\n") == 1
    assert _report(store_url, "zzzz", tmp_path / "o3") == 2
    assert "no run 'zzzz'" in capsys.readouterr().err


def test_runs_lists_kind_machine_and_duration_and_filters(store_url: str, capsys) -> None:
    assert cli.main(["--store", store_url, "runs", "--limit", "0"]) == 0
    listed = capsys.readouterr().out
    for _name, run_id in _runs():
        assert run_id in listed
    assert "sweep · query" in listed and "steps · script" in listed
    assert cli.main(["--store", store_url, "runs", "--name", "sysbench"]) == 0
    listed = capsys.readouterr().out
    assert "golden-sysbench" in listed and "golden-grid" not in listed
    assert cli.main(["--store", store_url, "runs", "--status", "killed"]) == 0
    assert capsys.readouterr().out.strip() == "no runs with status 'killed'"
    with pytest.raises(SystemExit) as stopped:
        cli.main(["--store", store_url, "runs", "--status", "bogus"])
    assert stopped.value.code == 2 and "invalid choice: 'bogus'" in capsys.readouterr().err


def test_compare_refuses_runs_of_different_work_with_the_reason(store_url: str,
                                                                capsys) -> None:
    ids = dict(_runs())
    code = cli.main(["--store", store_url, "compare", ids["golden-query-sweep"],
                     ids["golden-sysbench"]])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "cannot be compared: one measures a query workload, the other a sysbench workload" \
        in err
    code = cli.main(["--store", store_url, "compare", ids["golden-sysbench"],
                     ids["golden-sysbench-steps"]])
    assert code == 2 and "one is a sweep run, the other a steps run" in capsys.readouterr().err
    code = cli.main(["--store", store_url, "compare", ids["golden-grid"], ids["golden-grid"][:6]])
    assert code == 2 and "the same run is named twice" in capsys.readouterr().err
    assert cli.main(["--store", store_url, "compare", ids["golden-grid"]]) == 2
    assert "compare needs two runs or more" in capsys.readouterr().err


def test_a_run_compared_with_itself_agrees_everywhere(store_url: str, tmp_path: Path,
                                                      capsys) -> None:
    """The same samples on both sides: no configuration differs, every ratio is 1 and the
    best agrees — the floor of what compare must say. (Two real runs: test_report_e2e.)"""
    from knoblab.compare import _compare
    from knoblab.results import build_results, point_samples

    store = Store(store_url)
    run_id = dict(_runs())["golden-query-sweep"]
    results = build_results(store, run_id)
    samples = {run_id: point_samples(store, run_id)}
    found = _compare(results, results, samples)
    assert found.agree and found.machine == [] and found.spec == []
    measured = [r for r in found.rows if r.verdict != "unmeasured"]
    assert measured and all(r.verdict != "differs" and r.change is not None
                            and r.change.ratio == 1.0 and r.change.ci_low <= 1 <= r.change.ci_high
                            for r in measured)
