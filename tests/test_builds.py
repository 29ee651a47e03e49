"""Real builds and allocators compared. A second version of Debian's server, unpacked and not
installed (scripts/get-server; the tests' setup puts one in .cache/servers/other), started with
its own install step and share folder beside the installed one; the installed one started with
jemalloc and tcmalloc preloaded, each checked in the server's memory maps. Real sandboxes, the
real command."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from knoblab.server.binary import ServerBinary, compile_info, find_binary
from knoblab.server.sandbox import Sandbox, base_template
from tests.fakes import cli_env, knoblab_here, store_args

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parent.parent
OTHER = ROOT / ".cache" / "servers" / "other" / "usr" / "sbin" / "mariadbd"

COMPARED = """\
name = "builds"

[server.binary]
old = "{old}"
new = "{new}"
jemalloc = {{ path = "{new}", preload = "jemalloc" }}
tcmalloc = {{ path = "{new}", preload = "tcmalloc" }}

[dataset]
rows = 1000

[workload]
kind = "query"
sql = "SELECT BENCHMARK(20000, MD5('knoblab'))"
repetitions = 2

[sweep]
sort_buffer_size = ["256K", "2M"]
"""


@pytest.fixture(scope="module")
def other() -> ServerBinary:
    assert OTHER.is_file(), "scripts/setup --browser unpacks a second build of the server there"
    return find_binary(str(OTHER))


def _knoblab(folder: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return knoblab_here(store_args(folder / "s.sqlite", *args), cli_env(home), folder)


def test_a_second_build_starts_with_its_own_install_step_and_share_folder(
        other: ServerBinary, binary: ServerBinary, knoblab_home: Path) -> None:
    assert other.short_version != binary.short_version
    template = base_template(other, knoblab_home)
    assert template != base_template(binary, knoblab_home)
    assert not (template / "basedir").exists()  # the install step's base folder is gone
    with Sandbox(other, template / "data", {}, home=knoblab_home) as server:
        conn = server.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT VERSION(), @@lc_messages_dir, @@character_sets_dir")
                version, messages, charsets = cur.fetchone()
        finally:
            conn.close()
    assert version.startswith(other.short_version.split("-")[0])
    share = (OTHER.parent.parent / "share" / "mysql").resolve()
    assert Path(messages).resolve() == share
    assert Path(charsets).resolve() == share / "charsets"
    # Two builds told apart by the linker's build id, which Debian's debug symbols go by.
    ids = compile_info(other)["build_id"], compile_info(binary)["build_id"]
    assert all(ids) and ids[0] != ids[1]


@pytest.mark.parametrize("allocator", ["jemalloc", "tcmalloc"])
def test_a_preloaded_allocator_is_in_the_servers_maps_and_the_server_says_so(
        binary: ServerBinary, knoblab_home: Path, allocator: str) -> None:
    preloaded = binary.with_preload(allocator)
    assert preloaded.allocator == allocator and preloaded.preload is not None
    with Sandbox(preloaded, base_template(binary, knoblab_home) / "data", {},
                 home=knoblab_home) as server:
        maps = Path(f"/proc/{server.pid}/maps").read_text()
        conn = server.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT @@version_malloc_library")
                said = cur.fetchone()[0]
        finally:
            conn.close()
    assert str(preloaded.preload.resolve()) in maps
    assert allocator in said.lower(), said


def test_a_server_without_its_preloaded_library_in_its_maps_is_stopped(
        binary: ServerBinary, knoblab_home: Path) -> None:
    # Started with jemalloc; asked after the start whether tcmalloc is in its maps: it is not,
    # and the check says so in one line, as a server whose loader skipped its library.
    from knoblab.errors import UserError

    with Sandbox(binary.with_preload("jemalloc"), base_template(binary, knoblab_home) / "data",
                 {}, home=knoblab_home) as server:
        server.binary = binary.with_preload("tcmalloc")
        with pytest.raises(UserError, match=r"started without .*libtcmalloc.* \(preload = "
                                            r"tcmalloc\): it is not in the server's memory maps"):
            server._check_preload()


def test_builds_and_allocators_compared_in_one_run(
        other: ServerBinary, binary: ServerBinary, knoblab_home: Path, tmp_path: Path) -> None:
    spec = tmp_path / "builds.toml"
    spec.write_text(COMPARED.format(old=OTHER, new=binary.path))
    out = _knoblab(tmp_path, knoblab_home, "run", str(spec), "--json", str(tmp_path / "r.json"),
                   "--out", str(tmp_path / "out"))
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    servers = {s["label"]: s for s in result["servers"]}
    assert set(servers) == {"old", "new", "jemalloc", "tcmalloc"}
    assert servers["old"]["version"] == other.short_version
    assert servers["new"]["version"] == binary.short_version
    assert servers["old"]["compile"]["build_id"] != servers["new"]["compile"]["build_id"]
    assert servers["new"]["allocator"] is None
    assert servers["jemalloc"]["allocator"] == "jemalloc"
    assert "libjemalloc" in servers["jemalloc"]["preload"]
    assert servers["tcmalloc"]["allocator"] == "tcmalloc"
    assert all(p["n"] == 2 and p["failed"] == 0 for p in result["points"])
    assert len(result["points"]) == 8  # two values on four servers
    compared = result["servers_compared"]
    assert compared and all(len(c["rows"]) == 4 for c in compared)
    # Who the servers are, in the terminal and the report: versions, build ids, allocators.
    flat = " ".join(out.stdout.split())
    assert "build id" in flat and "allocator" in flat and "tcmalloc" in flat
    report = (tmp_path / "out" / "report.md").read_text()
    assert "jemalloc preloaded" in report
    assert compile_info(other)["build_id"] in report


@pytest.mark.parametrize(("preload", "said"), [
    ("nosuch", "name an allocator (jemalloc, tcmalloc) or give a library's path"),
    ("/nonexistent/libx.so", "no such file"),
    ("{text}", "is not a shared library"),  # the loader would skip it without a word
])
def test_a_preload_that_cannot_work_is_one_line(binary: ServerBinary, knoblab_home: Path,
                                                 tmp_path: Path, preload: str,
                                                 said: str) -> None:
    text = tmp_path / "not-a-library.so"
    text.write_text("not a library\n")
    spec = tmp_path / "bad.toml"
    spec.write_text(f'name = "bad"\n[server]\nbinary = {{ path = "{binary.path}", preload = '
                    f'"{preload.format(text=text)}" }}\n[dataset]\nrows = 1000\n[workload]\n'
                    'kind = "query"\n'
                    'sql = "SELECT 1"\nrepetitions = 2\n[sweep]\n'
                    'sort_buffer_size = ["256K", "2M"]\n')
    before = set((knoblab_home / "sandboxes").glob("*"))
    out = _knoblab(tmp_path, knoblab_home, "run", str(spec))
    assert out.returncode == 2, out.stdout + out.stderr
    assert said in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert set((knoblab_home / "sandboxes").glob("*")) == before  # nothing left running
