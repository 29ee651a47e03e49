"""`knoblab runs` shows a tuning study as one row (its trials, best gain or recommendation,
status, when, how long) instead of its dozens of runs; `--study NAME` lists those runs; and
`knoblab report study:NAME` renders the study's report again from the store, measuring
nothing. The study is searched on the fake kind and server (tests/fakes.py) through the
command itself."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from knoblab import cli, consoles, runner
from knoblab import search as tune_module
from knoblab.errors import UserError
from knoblab.store import RunInfo, Store

BOX = re.compile("[\u2500-\u257f]")
KNOBS = '[tune.knobs]\nsort_buffer_size = ["1M", "64M"]\nread_buffer_size = ["128K", "8M"]\n'


def _spec(tmp_path: Path, name: str = "mix", trials: int = 6) -> Path:
    spec = tmp_path / f"{abs(hash(name))}.toml"
    spec.write_text(f"name = {json.dumps(name)}\n[workload]\nkind = \"fake\"\n"
                    f"[statistics]\nseed = 3\n[tune]\ntrials = {trials}\nvalidate = 1\nbatch = 6\n"
                    + KNOBS)
    return spec


def _run_spec(tmp_path: Path) -> Path:
    spec = tmp_path / "sweep.toml"
    spec.write_text('name = "plain sweep"\n[workload]\nkind = "fake"\n[statistics]\nseed = 3\n'
                    '[sweep]\nsort_buffer_size = ["1M", "32M"]\n')
    return spec


@pytest.fixture
def studied(fake_servers: None, tmp_path: Path, capsys) -> tuple[str, Path]:
    """A store holding a plain run and a finished study of 6 trials (its report in study/)."""
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    assert cli.main(["--store", url, "run", str(_run_spec(tmp_path)),
                     "--out", str(tmp_path / "plain")]) == 0
    capsys.readouterr()
    assert cli.main(["--store", url, "tune", str(_spec(tmp_path)),
                     "--out", str(tmp_path / "study")]) == 0
    (tmp_path / "study" / "printed.txt").write_text(capsys.readouterr().out)
    return url, tmp_path / "study"


def _listed(capsys, *args: str) -> tuple[int, str]:
    """The exit code, and what was printed with the tables' lines taken out (a cell wrapped
    over lines reads as one text)."""
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, " ".join(BOX.sub(" ", captured.out + captured.err).split())


def test_runs_shows_the_study_as_one_row_and_its_runs_only_when_asked(studied, capsys) -> None:
    url, _ = studied
    store = Store(url)
    inner = [r for r in store.list_runs(limit=None) if r["name"].startswith("mix: ")]
    # Every step of the search (warm: several trials to a start), validation and reduction
    # is a run of its own.
    assert len(inner) >= 5 and any(" more, on one start" in r["name"] for r in inner)
    code, listed = _listed(capsys, "--store", url, "runs", "--limit", "0")
    assert code == 0
    # One row for the study, with its trials and what it recommends; the plain run as before.
    assert listed.count("study") >= 1 and "mix" in listed and "plain sweep" in listed
    assert not any(r["id"] in listed for r in inner), "the study's runs are not listed"
    assert "trial" not in listed.replace("trials", "")
    assert "6 trials" in listed and "recommended: sort_buffer_size" in listed
    assert "done" in listed and "knoblab report study:NAME" in listed
    # Its runs, when asked: every one of them, and nothing else.
    code, listed = _listed(capsys, "--store", url, "runs", "--study", "mix", "--limit", "0")
    assert code == 0
    assert all(r["id"] in listed for r in inner) and "plain sweep" not in listed
    assert "mix: trial" in listed and "mix: validat" in listed
    # The limit counts rows shown: the study is one.
    code, listed = _listed(capsys, "--store", url, "runs", "--limit", "2")
    assert code == 0 and "mix" in listed and "plain sweep" in listed


def test_report_of_a_study_renders_its_report_again_without_measuring(
        studied, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    url, first = studied
    before = len(Store(url).list_runs(limit=None))

    def measure(*args, **kwargs):
        raise AssertionError("the report of a study measures nothing")

    monkeypatch.setattr(runner, "start_run", measure)
    monkeypatch.setattr(tune_module, "tune", measure)
    code, shown = _listed(capsys, "--store", url, "report", "study:mix", "--out",
                          str(tmp_path / "again"), "--json", str(tmp_path / "again.json"))
    assert code == 0, shown
    again = tmp_path / "again"
    # What the terminal showed, but the folder it names.
    printed = " ".join(BOX.sub(" ", (first / "printed.txt").read_text()).split())
    assert "study mix: 6 trials" in shown and "sort_buffer_size" in shown
    assert shown.replace(str(again), "") == printed.replace(str(first), "")
    for name in ("tune.json", "recommended.cnf", "report.md"):
        assert (again / name).read_text() == (first / name).read_text(), name
    assert json.loads((tmp_path / "again.json").read_text()) == \
        json.loads((first / "tune.json").read_text())
    assert sorted(p.name for p in again.glob("*.png")) == \
        sorted(p.name for p in first.glob("*.png"))
    assert len(Store(url).list_runs(limit=None)) == before


@pytest.mark.parametrize("args, words", [
    (["report", "mix"], ["'mix' is a tuning study, not a run", "knoblab report study:mix"]),
    (["report", "study:nosuch"], ["no study 'nosuch'", "studies: mix"]),
    (["runs", "--study", "nosuch"], ["no runs of study 'nosuch'", "no such study",
                                     "studies: mix"]),
])
def test_a_study_asked_for_wrongly_is_one_line(studied, capsys, args, words) -> None:
    url, _ = studied
    code, shown = _listed(capsys, "--store", url, *args)
    assert code == (0 if args[0] == "runs" else 2)
    assert all(w in shown for w in words), shown
    assert "Traceback" not in shown


def test_a_stopped_study_is_listed_as_stopped_and_has_no_report_yet(
        fake_servers: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    scored = consoles.TuneConsole.scored

    told: list[int] = []

    def stop_after_three(self, outcome, best, budget_left, direction):
        scored(self, outcome, best, budget_left, direction)
        told.append(outcome.number)
        if len(told) == 3:  # the baseline and two more (a step's trials are told in turn)
            raise KeyboardInterrupt

    monkeypatch.setattr(consoles.TuneConsole, "scored", stop_after_three)
    assert cli.main(["--store", url, "tune", str(_spec(tmp_path, trials=8))]) == 130
    code, listed = _listed(capsys, "--store", url, "runs")
    assert code == 0 and "interrupted" in listed and "3 trials" in listed
    assert "mix: trial" not in listed
    code, shown = _listed(capsys, "--store", url, "report", "study:mix")
    assert code == 2 and "stopped before its search ended" in shown


def test_a_study_named_anything_is_listed_literally(fake_servers: None, tmp_path: Path,
                                                    capsys) -> None:
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    name = "[bold red]x[/] \x1b[2J y"
    assert cli.main(["--store", url, "tune", str(_spec(tmp_path, name, trials=3)),
                     "--out", str(tmp_path / "study")]) == 0
    capsys.readouterr()
    code, listed = _listed(capsys, "--store", url, "runs")
    assert code == 0 and "\x1b" not in listed
    assert "[bold red]x[/] \\x1b[2J y" in listed
    code, shown = _listed(capsys, "--store", url, "report", f"study:{name}", "--out",
                          str(tmp_path / "again"))
    assert code == 0 and "\x1b" not in shown


def test_runs_finds_plain_runs_behind_a_page_of_a_studys_runs(tmp_path: Path, capsys) -> None:
    """The listing reads the store a page at a time and skips a study's runs: a plain run
    older than hundreds of them is still listed (and is `latest`), and the study's are all
    counted."""
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    store = Store(url)

    def made(name: str) -> str:
        return store.create_run(name=name, experiment="sweep", spec_source="", server_binary="",
                                server_version="", info=RunInfo(),
                                point_list=[({"a": "1"}, {"a": "1"})])

    plain = made("old plain run")
    with store.measuring_for("big"):
        inner = [made(f"big: trial {i}") for i in range(501)]
    code, listed = _listed(capsys, "--store", url, "runs")
    assert code == 0 and plain in listed and "big: trial" not in listed
    code, listed = _listed(capsys, "--store", url, "runs", "--study", "big", "--limit", "0")
    assert code == 0 and all(run_id in listed for run_id in inner) and plain not in listed
    assert store.run("latest")["id"] == plain, "latest is never a study's run"


def test_latest_after_knoblab_tune_is_the_study_and_never_one_of_its_runs(
        fake_servers: None, tmp_path: Path, capsys) -> None:
    """`knoblab report latest` after a tune shows the study's report; a command taking runs
    only (compare) takes the newest run of its own; after a plain run, latest is that run."""
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    store = Store(url)
    plain = []
    for n in range(2):
        assert cli.main(["--store", url, "run", str(_run_spec(tmp_path)),
                         "--out", str(tmp_path / f"plain{n}")]) == 0
        plain.append(store.list_runs(limit=1)[0]["id"])
    assert cli.main(["--store", url, "tune", str(_spec(tmp_path, trials=3)),
                     "--out", str(tmp_path / "study")]) == 0
    capsys.readouterr()
    code, shown = _listed(capsys, "--store", url, "report", "latest", "--out",
                          str(tmp_path / "latest"))
    assert code == 0, shown
    assert "study mix: 3 trials" in shown
    assert (tmp_path / "latest" / "tune.json").read_text() == \
        (tmp_path / "study" / "tune.json").read_text()
    code, shown = _listed(capsys, "--store", url, "compare", plain[0], "latest")
    assert code == 0 and f"run {plain[1]} against run {plain[0]}" in shown, shown
    # A plain run after the study: latest is that run, for report and compare alike.
    assert cli.main(["--store", url, "run", str(_run_spec(tmp_path)),
                     "--out", str(tmp_path / "plain2")]) == 0
    newest = store.list_runs(limit=1)[0]["id"]
    assert newest not in plain and store.run("latest")["id"] == newest
    code, shown = _listed(capsys, "--store", url, "report", "latest", "--json",
                          str(tmp_path / "run.json"), "--out", str(tmp_path / "again"))
    assert code == 0, shown
    assert json.loads((tmp_path / "run.json").read_text())["run_id"] == newest


def test_latest_in_a_store_of_only_a_studys_runs_is_one_line(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    with store.measuring_for("big"):
        store.create_run(name="big: trial 0", experiment="sweep", spec_source="", server_binary="",
                         server_version="", info=RunInfo(), point_list=[({"a": "1"}, {"a": "1"})])
    with pytest.raises(UserError, match="no run of its own yet .only tuning studies'"):
        store.run("latest")
