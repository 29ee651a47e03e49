"""Every message names what exists: sections a spec accepts, the setting that was refused and
where it was written, the options a command has, the URL the user meant."""

from __future__ import annotations

import copy
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from knoblab import capturing, studies
from knoblab.admin import refuse_admin
from knoblab.catalog import Catalog, Knob
from knoblab.cli import build_parser
from knoblab.errors import UserError
from knoblab.safety import check
from knoblab.spec import SECTION_KEYS, TOP_KEYS, parse_spec
from knoblab.store import parse_url
from tests.fakes import cli_env, knoblab_here

ROOT = Path(__file__).resolve().parents[1]
MINIMAL: dict[str, Any] = {"dataset": {"rows": 1000}, "workload": {"sql": "SELECT 1"},
                           "sweep": {"read_buffer_size": ["64K", "128K"]}}


def _error(data: dict[str, Any]) -> str:
    with pytest.raises(UserError) as info:
        parse_spec(data)
    return str(info.value)


def _spec_with(**sections: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(MINIMAL)
    for name, content in sections.items():
        if name == "top":
            data.update(content)
        else:
            data.setdefault(name, {}).update(content)
    return data


# --------------------------------------------------------------- sections a message names


def _a_spec_section(name: str) -> bool:
    """Whether `[name]` (or `[[name]]`) is a section a spec has."""
    head, _, sub = name.strip("[]").partition(".")
    if head not in TOP_KEYS:
        return False
    return not sub or sub in SECTION_KEYS.get(head, set()) or (head, sub) == ("tune", "knobs")


def test_set_global_in_a_workload_names_sections_that_exist():
    message = _error(_spec_with(workload={"sql": "SET GLOBAL read_buffer_size = 1"}))
    named = re.findall(r"\[\[?[a-z_.]+\]\]?", message)
    assert "[server.config]" in named and "[sweep]" in named
    assert all(_a_spec_section(name) for name in named), named


def test_every_section_refuse_admin_names_exists():
    for sql in ("SET GLOBAL x = 1", "SET @@GLOBAL.x = 1", "SET PERSIST x = 1"):
        with pytest.raises(UserError) as info:
            refuse_admin(sql, "[workload] sql")
        named = re.findall(r"\[\[?[a-z_.]+\]\]?", str(info.value))
        assert all(_a_spec_section(name) for name in named), (sql, named)


# --------------------------------------------------------------- design goes in [workload]


@pytest.mark.parametrize(("sections", "where"), [
    ({"top": {"design": "blocked"}}, "at the top of the spec"),
    ({"server": {"design": "blocked"}}, "in [server]"),
    ({"server": {"config": {"design": "blocked"}}}, "in [server.config]"),
    ({"statistics": {"design": "restarts"}}, "in [statistics]"),
    ({"dataset": {"design": "restarts"}}, "in [dataset]"),
    ({"sweep": {"design": ["blocked", "restarts"]}}, "in [sweep]"),
], ids=["top", "server", "server.config", "statistics", "dataset", "sweep"])
def test_design_outside_workload_is_one_line_naming_workload(sections, where):
    message = _error(_spec_with(**sections))
    assert where in message and "belongs under [workload]" in message
    assert "\n" not in message


def test_design_in_workload_is_taken():
    spec = parse_spec(_spec_with(workload={"design": "restarts"}))
    assert spec.workload.rounds.design == "restarts"


# --------------------------------------------------------------- what was refused, by name


def _knob(name: str, default: str) -> Knob:
    return Knob(name=name, type="BIGINT UNSIGNED", scope="GLOBAL", default=default,
                minimum=0, maximum=2**64 - 1, block_size=None, choices=(), dynamic=True,
                startup_option=True)


CATALOG = Catalog("10.11.19-MariaDB", {k.name: k for k in [
    _knob("read_buffer_size", str(128 << 10)), _knob("innodb_flush_log_at_trx_commit", "1")]})


def _refusal(base: dict[str, str], points: list[tuple[dict[str, str], dict[str, str]]]) -> str:
    with pytest.raises(UserError) as info:
        check(points, base, CATALOG, connections=lambda requested: 2,
              allow_durability_tradeoff=False, memory_budget=1 << 40)
    return str(info.value)


def test_durability_in_server_config_is_named_there_not_by_a_point():
    message = _refusal({"innodb_flush_log_at_trx_commit": "2"},
                       [({"read_buffer_size": "8200"}, {"read_buffer_size": "8192"})])
    assert message.startswith("[server.config] innodb_flush_log_at_trx_commit = 2 gives up "
                              "durability")
    assert "read_buffer_size" not in message


def test_memory_of_server_config_alone_is_named_there_not_by_a_point():
    points = [({"read_buffer_size": "8200"}, {"read_buffer_size": "8192"})]
    with pytest.raises(UserError) as info:
        check(points, {"innodb_buffer_pool_size": str(64 << 30)}, CATALOG,
              connections=lambda requested: 2, allow_durability_tradeoff=False,
              memory_budget=1 << 30)
    assert str(info.value).startswith("[server.config]: estimated memory")
    # a point's own value over the budget is still that point's
    with pytest.raises(UserError) as info:
        check([({"innodb_buffer_pool_size": "64G"}, {"innodb_buffer_pool_size": str(64 << 30)})],
              {},
              CATALOG, connections=lambda requested: 2, allow_durability_tradeoff=False,
              memory_budget=1 << 30)
    assert str(info.value).startswith("innodb_buffer_pool_size=64G: estimated memory")


def test_durability_of_a_swept_value_is_named_by_its_point():
    message = _refusal({}, [({"innodb_flush_log_at_trx_commit": "2"},
                             {"innodb_flush_log_at_trx_commit": "2"})])
    assert message.startswith("innodb_flush_log_at_trx_commit=2: innodb_flush_log_at_trx_commit "
                              "= 2 gives up durability")


@pytest.mark.parametrize("values", [["1M"], [], "1M"], ids=["one", "none", "not-a-list"])
def test_a_misspelled_setting_with_one_value_hears_about_its_name_first(values):
    spec = parse_spec(_spec_with(top={"sweep": {"read_bufer_size": values}}))
    with pytest.raises(UserError) as info:
        spec.points(CATALOG)
    message = str(info.value)
    assert "'read_bufer_size' is not a setting" in message
    assert "did you mean read_buffer_size" in message
    assert "two values" not in message


@pytest.mark.parametrize("values", [["1M"], [], "1M"], ids=["one", "none", "not-a-list"])
def test_a_real_setting_with_one_value_needs_two(values):
    spec = parse_spec(_spec_with(top={"sweep": {"read_buffer_size": values}}))
    with pytest.raises(UserError, match=r"\[sweep\] read_buffer_size: give a list of at least "
                                        "two values"):
        spec.points(CATALOG)


@pytest.mark.server
def test_run_with_a_misspelled_setting_of_one_value_suggests_the_name(knoblab_home, catalog,
                                                                      tmp_path):
    """Through the command, where the server's catalog decides (before any data is built)."""
    spec = tmp_path / "spec.toml"
    spec.write_text('[dataset]\nrows = 1000\n[workload]\nsql = "SELECT 1"\nrepetitions = 1\n'
                    '[sweep]\nread_bufer_size = ["1M"]\n')
    result = _knoblab(["run", str(spec)], knoblab_home, tmp_path)
    assert result.returncode == 2, result.stderr
    assert "did you mean read_buffer_size" in result.stderr
    assert "two values" not in result.stderr


# --------------------------------------------------------------- --help says what is true


def _help(*command: str) -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    target = sub.choices[command[0]] if command else parser  # type: ignore[attr-defined]
    return " ".join(target.format_help().split())


def test_tune_help_names_the_folder_a_study_report_goes_to():
    shown = _help("tune")
    assert f"default: {studies.report_folder('NAME')})" in shown
    assert "knoblab-results/RUN" not in shown


def test_capture_help_says_which_folders_out_takes(tmp_path):
    shown = _help("capture")
    assert "a new or empty folder, or an earlier capture's" in shown
    # and the program takes each of them
    capturing.check_out(tmp_path / "new")
    (tmp_path / "empty").mkdir()
    capturing.check_out(tmp_path / "empty")
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    for name in (capturing.MARK, capturing.LOG, capturing.SPEC, capturing.SUMMARY):
        (earlier / name).write_text("x")
    capturing.check_out(earlier)


def test_store_help_says_how_slashes_read():
    shown = _help()
    assert "three slashes: PATH relative to the current folder" in shown
    assert "sqlite:////tmp/k.sqlite is /tmp/k.sqlite" in shown
    assert parse_url("sqlite:////tmp/k.sqlite").database == "/tmp/k.sqlite"


# --------------------------------------------------------------- sqlite:///tmp/x


def test_a_relative_sqlite_path_meant_absolute_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # holds no tmp/; / does
    with pytest.raises(UserError) as info:
        parse_url("sqlite:///tmp/runs.sqlite")
    message = str(info.value)
    assert "names tmp/runs.sqlite relative to the current folder" in message
    assert "for /tmp/runs.sqlite write sqlite:////tmp/runs.sqlite" in message
    with pytest.raises(UserError, match=r"^\[tune\] storage: "):
        parse_url("sqlite:///tmp/study.sqlite", "[tune] storage")


def test_a_relative_sqlite_path_that_is_relative_is_taken(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tmp").mkdir()  # here, tmp/ is a folder of the current one
    assert parse_url("sqlite:///tmp/runs.sqlite").database == "tmp/runs.sqlite"
    assert parse_url("sqlite:///runs.sqlite").database == "runs.sqlite"
    assert parse_url("sqlite:///nosuch/runs.sqlite").database == "nosuch/runs.sqlite"


def _knoblab(args: list[str], home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return knoblab_here(args, cli_env(home), cwd)


def test_the_store_url_meant_absolute_is_one_line_from_the_command(tmp_path):
    result = _knoblab(["--store", "sqlite:///tmp/runs.sqlite", "runs"], tmp_path / "home",
                      tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "write sqlite:////tmp/runs.sqlite" in lines[0]
    assert not (tmp_path / "tmp").exists()
