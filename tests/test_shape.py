"""[machine]: the sandbox's shape read from a spec, and its data directory on the file system
under test."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from knoblab.errors import UserError
from knoblab.server.cgroups import client_apart, format_cpu_list
from knoblab.server.sandbox import Sandbox, base_template, reap_orphans
from knoblab.server.shape import Shape
from knoblab.spec import parse_spec

MINIMAL = {"dataset": {"rows": 1000}, "workload": {"sql": "SELECT COUNT(*) FROM dt2"},
           "sweep": {"read_buffer_size": ["64K", "128K"]}}


def test_a_shape_is_read_and_said_in_words(tmp_path: Path, catalog):
    shape = Shape.from_spec({"memory": "2G", "cpus": 1, "disk_read": "100MB/s",
                             "disk_write": "1.5GB/s", "iops": 500, "datadir": "data"}, tmp_path)
    assert (shape.memory, shape.cpus, shape.disk_read, shape.disk_write, shape.iops) == (
        2 << 30, 1, 100_000_000, 1_500_000_000, 500)
    assert shape.datadir == tmp_path / "data" and shape.limited
    assert shape.describe() == ("2G of memory, 1 CPU, reads at 100 MB/s, writes at 1.5 GB/s, "
                                f"500 I/O per second, data in {tmp_path / 'data'}")
    assert json.dumps(shape.to_json())
    assert not Shape.from_spec({"datadir": "/tmp"}, None).limited
    # The machine's memory is the memory budget unless [server] gives one.
    from knoblab import safety

    spec = parse_spec({**MINIMAL, "machine": {"memory": "256M"}})
    assert spec.machine is not None and spec.machine.memory == 256 << 20
    points = [({}, {})]
    # The server's default caches are left to the kernel's limit; what the spec sets is not.
    safety.check(points, {}, catalog, connections=lambda _: 2,
                 allow_durability_tradeoff=False, memory_budget=None,
                 machine_memory=spec.machine.memory)
    with pytest.raises(UserError, match=r"over the budget of 256M \(\[machine\] memory\)"):
        safety.check(points, {"innodb_buffer_pool_size": str(256 << 20)}, catalog,
                     connections=lambda _: 2, allow_durability_tradeoff=False,
                     memory_budget=None, machine_memory=spec.machine.memory)
    safety.check(points, {}, catalog, connections=lambda _: 2, allow_durability_tradeoff=False,
                 memory_budget=4 << 30, machine_memory=spec.machine.memory)


@pytest.mark.parametrize("machine, said", [
    ({"memory": "64M"}, "below 160M, the least a MariaDB server starts and runs in"),
    ({"memory": "lots"}, "[machine] memory"),
    ({"memory": "64T"}, "a sandbox cannot have more memory than the machine it runs on"),
    ({"cpus": 4096}, "a sandbox cannot have more CPUs than the machine it runs on"),
    ({"cpus": 0}, "[machine] cpus = 0: must be a whole number of at least 1"),
    ({"cpu": 0.5, "cpus": 1}, "give cpus (how many CPUs) or cpu (a share of CPU time)"),
    ({"cpu": "half"}, "[machine] cpu = 'half': a share of CPU time"),
    ({"disk_read": "fast"}, "[machine] disk_read = 'fast': give a rate"),
    ({"disk_write": "10KB/s"}, "below 1 MB/s"),
    ({"ram": "2G"}, "ram"),
    ({"datadir": ""}, "[machine] datadir: give a folder"),
])
def test_a_bad_shape_is_one_line(machine: dict, said: str):
    with pytest.raises(UserError) as caught:
        parse_spec({**MINIMAL, "machine": machine})
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_a_running_server_has_no_shape():
    with pytest.raises(UserError, match="a running server runs on its own machine"):
        parse_spec({**MINIMAL, "server": {"kind": "external", "host": "127.0.0.1"},
                    "machine": {"memory": "1G"}})


@pytest.mark.server
def test_the_data_lives_in_the_datadir_and_nothing_is_left(binary, knoblab_home: Path,
                                                          tmp_path: Path):
    fs = tmp_path / "fs under test".replace(" ", "-")
    fs.mkdir()
    shape = Shape.from_spec({"datadir": str(fs)}, None)
    with Sandbox(binary, base_template(binary, knoblab_home) / "data", {}, home=knoblab_home,
                 shape=shape) as server:
        (root,) = fs.iterdir()
        assert root.name == f"knoblab-{server.dir.name}"
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT @@datadir, @@tmpdir")
            datadir, tmpdir = cur.fetchone()
        assert Path(datadir).resolve() == (root / "data").resolve()
        assert Path(tmpdir).resolve() == (root / "tmp").resolve()
    assert not list(fs.iterdir())


@pytest.mark.server
def test_a_killed_owner_leaves_no_data_in_the_datadir(binary, knoblab_home: Path,
                                                     tmp_path: Path):
    fs = tmp_path / "fs"
    fs.mkdir()
    template = base_template(binary, knoblab_home) / "data"
    code = (f"import sys, time\nfrom pathlib import Path\n"
            f"from knoblab.server.binary import find_binary\n"
            f"from knoblab.server.sandbox import Sandbox\n"
            f"from knoblab.server.shape import Shape\n"
            f"s = Sandbox(find_binary(), Path({str(template)!r}), {{}}, "
            f"home=Path({str(knoblab_home)!r}), shape=Shape(datadir=Path({str(fs)!r})))\n"
            f"s.start(); print('up', flush=True); time.sleep(60)\n")
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "KNOBLAB_HOME": str(knoblab_home)})
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "up"
        assert len(list(fs.iterdir())) == 1
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # its server dies with it (PR_SET_PDEATHSIG)
        reap_orphans(knoblab_home)
        if not list(fs.iterdir()):
            break
        time.sleep(0.2)
    assert not list(fs.iterdir())


@pytest.mark.parametrize("problem", ["missing", "file", "read-only", "unsafe", "full"])
def test_a_datadir_that_cannot_be_used_is_one_line(tmp_path: Path, knoblab_home: Path,
                                                   binary, problem: str):
    from knoblab.server.sandbox import SandboxTarget

    path = {"missing": tmp_path / "nowhere", "file": tmp_path / "a-file",
            "read-only": tmp_path / "ro", "unsafe": tmp_path / "a b",
            "full": tmp_path / "full"}[problem]
    if problem == "file":
        path.write_text("x")
    elif problem in ("read-only", "unsafe", "full"):
        path.mkdir()
    # A small file system, filled: what a full disk looks like.
    if problem == "full" and (os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1M", "tmpfs", str(path)],
            capture_output=True, check=False).returncode != 0):
        pytest.skip("needs root to mount a small file system")
    if problem == "full":
        with contextlib.suppress(OSError), (path / "filler").open("wb") as filler:
            filler.write(b"x" * (2 << 20))
    # A read-only bind mount of a folder: what a read-only file system looks like.
    if problem == "read-only" and (os.geteuid() != 0 or subprocess.run(
            ["mount", "--bind", "-o", "ro", str(path), str(path)],
            capture_output=True, check=False).returncode != 0):
        pytest.skip("needs root to make a read-only mount")
    try:
        with pytest.raises(UserError) as caught:
            SandboxTarget("", binary, knoblab_home, Shape(datadir=path))
        said = str(caught.value)
        assert "[machine] datadir" in said and "\n" not in said
        assert {"missing": "no such folder", "file": "no such folder",
                "read-only": "read-only", "unsafe": "cannot use a path holding",
                "full": "full"}[problem] in said
    finally:
        if problem in ("read-only", "full"):
            subprocess.run(["umount", str(path)], check=False)


@pytest.fixture
def control_groups() -> None:
    """The machine's control groups, or the test is skipped saying why they are not here."""
    from knoblab.server.sandbox import hierarchy

    try:
        hierarchy()
    except UserError as exc:
        pytest.skip(f"no control groups here: {exc}")


def _groups_left() -> list[Path]:
    """This process's groups (knoblab-<name>-<pid>): tests running beside it make their own."""
    return [p for p in Path("/sys/fs/cgroup").glob(f"*/**/knoblab-*-{os.getpid()}")
            if p.is_dir()]


@pytest.mark.server
def test_a_shaped_sandbox_runs_in_its_group_and_leaves_none(binary, knoblab_home: Path,
        control_groups: None):
    shape = Shape.from_spec({"memory": "512M", "cpus": 1, "disk_read": "200MB/s"}, None)
    before = _groups_left()
    with Sandbox(binary, base_template(binary, knoblab_home) / "data", {}, home=knoblab_home,
                 shape=shape) as server:
        assert server.group is not None and server.pid is not None
        membership = Path(f"/proc/{server.pid}/cgroup").read_text()
        assert server.group.name in membership
        limits = {p.name: p for p in server.group.paths}
        memory = next(p for p in server.group.paths if "memory" in str(p))
        assert int((memory / "memory.limit_in_bytes").read_text()) == 512 << 20
        assert len(limits) == 1  # one name, in each controller
        cpuset = next(p for p in server.group.paths if "cpuset" in str(p))
        assert (cpuset / "cpuset.cpus").read_text().strip() == "0"
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT 1")
        # The copy of its data is not in the page cache on knoblab's account: the server
        # reads it from the disk, through its own limits, into its own memory.
        from knoblab.workloads.query import cached_fraction

        unread = server.datadir / "mysql" / "help_topic.MAD"
        assert unread.stat().st_size > 0 and cached_fraction([unread]) == 0.0
    assert _groups_left() == before


@pytest.mark.server
def test_a_buffer_pool_larger_than_the_machine_is_said_not_hung(binary, knoblab_home: Path,
        control_groups: None):
    from knoblab.server.sandbox import OutOfMemory

    shape = Shape.from_spec({"memory": "160M"}, None)
    before = _groups_left()
    sandbox = Sandbox(binary, base_template(binary, knoblab_home) / "data",
                      {"innodb_buffer_pool_size": "1G"}, home=knoblab_home, shape=shape)
    with pytest.raises(OutOfMemory) as caught:
        sandbox.start()
        # The pool is allocated as it is used: fill it until the kernel steps in.
        with sandbox.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE big")
            cur.execute("CREATE TABLE big.t (a INT PRIMARY KEY, b CHAR(255)) ENGINE=InnoDB")
            cur.execute("USE big")
            with sandbox.watch():
                cur.execute("INSERT INTO big.t SELECT seq, REPEAT('x', 255) FROM seq_1_to_2000000")
    sandbox.stop()
    assert "[machine] memory = 160M is less than the server needs" in str(caught.value)
    assert _groups_left() == before


def test_a_study_measured_on_one_shape_is_not_continued_on_another():
    from knoblab.machine import differences

    plain = {"cpu": "x", "cores": "2"}
    assert differences(plain, dict(plain)) == []
    assert differences({**plain, "shape": "2G of memory"}, {**plain, "shape": "8G of memory"}) \
        == ["shape: 2G of memory here, 8G of memory there"]
    assert differences({**plain, "shape": "2G of memory"}, plain) == [
        "shape: 2G of memory here, no limits there"]


@pytest.mark.parametrize("sweep, machine, said", [
    ({"machine.ram": ["1G", "2G"]}, {}, "[machine] has no 'ram'"),
    ({"machine.memory": ["1G", "2G"]}, {"memory": "1G"},
     "machine.memory is both in [machine] and [sweep]"),
    ({"machine.memory": ["1G", "64M"]}, {}, "below 160M"),
    ({"machine.cpus": [1, 4096]}, {}, "more CPUs than the machine"),
])
def test_a_bad_machine_sweep_is_one_line(sweep: dict, machine: dict, said: str):
    spec = {**MINIMAL, "sweep": {**MINIMAL["sweep"], **sweep}}
    if machine:
        spec["machine"] = machine
    with pytest.raises(UserError) as caught:
        parse_spec(spec)
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_a_swept_machine_gives_each_point_its_shape(catalog):
    spec = parse_spec({**MINIMAL, "machine": {"cpus": 1},
                       "sweep": {**MINIMAL["sweep"], "machine.memory": ["512M", "2G"]}})
    assert spec.swept_settings() == ["read_buffer_size"]
    _, points, _ = spec.points(catalog)
    assert len(points) == 4 and all("machine.memory" not in p.config for p in points)
    shapes = {p.requested["machine.memory"]: spec.shape(p.requested) for p in points}
    assert shapes["512M"] == Shape(memory=512 << 20, cpus=1)
    assert shapes["2G"] == Shape(memory=2 << 30, cpus=1)
    with pytest.raises(UserError, match="the machine is swept for sandboxes only"):
        parse_spec({**MINIMAL, "server": {"kind": "external", "host": "127.0.0.1"},
                    "sweep": {**MINIMAL["sweep"], "machine.memory": ["512M", "2G"]}})


@pytest.mark.server
def test_a_machine_sweep_runs_each_shape_and_judges_them_apart(knoblab_home: Path,
                                                             tmp_path: Path,
                                                             control_groups: None):
    spec = tmp_path / "shapes.toml"
    spec.write_text('name = "shapes"\n[server.config]\ninnodb_buffer_pool_size = "16M"\n'
                    'key_buffer_size = "8M"\naria_pagecache_buffer_size = "8M"\n'
                    '[dataset]\nrows = 2000\n[workload]\nsql = "SELECT COUNT(*) FROM dt2"\n'
                    'repetitions = 2\n[machine]\ncpus = 1\n'
                    '[sweep]\nread_buffer_size = ["64K", "1M"]\n'
                    '"machine.memory" = ["256M", "1G"]\n')
    env = {k: v for k, v in os.environ.items() if k != "KNOBLAB_STORE"}
    env["KNOBLAB_HOME"] = str(knoblab_home)
    out = subprocess.run(
        [sys.executable, "-m", "knoblab.cli", "--store", f"sqlite:///{tmp_path / 's.sqlite'}",
         "run", str(spec), "--json", str(tmp_path / "r.json"), "--out", str(tmp_path / "o")],
        env=env, capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert "machine.memory" in result["slices"]
    assert "machine.memory is the sandbox's machine, given when it starts" in out.stdout
    import sqlite3

    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        details = [(json.loads(r), json.loads(d))
                   for r, d in db.execute("SELECT p.requested, t.details FROM trials t JOIN "
                                        "points p ON p.run_id = t.run_id AND "
                                        "p.idx = t.point_idx WHERE t.status = 'done'")]
    assert len(details) == 8
    assert all(d["machine"]["memory"] == {"256M": 256 << 20, "1G": 1 << 30}[
        r["machine.memory"]] for r, d in details)
    # The server had the first CPU; the client (knoblab's query threads) ran on the others.
    server, *others = sorted(os.sched_getaffinity(0))
    assert all(d["server_cpus"] == str(server) for _, d in details)
    if others:
        assert all(d["client_cpus"] == format_cpu_list(set(others)) for _, d in details)


@pytest.mark.server
def test_a_cold_measurement_empties_only_the_sandboxs_own_cache(binary, knoblab_home: Path,
        control_groups: None):
    from knoblab.workloads.query import cached_fraction

    shape = Shape.from_spec({"memory": "512M"}, None)
    outside = knoblab_home / "outside-the-sandbox"
    outside.write_bytes(os.urandom(4 << 20))  # read by knoblab: cached on its own account
    outside.read_bytes()
    with Sandbox(binary, base_template(binary, knoblab_home) / "data", {}, home=knoblab_home,
                 shape=shape) as server:
        with server.connect() as conn, conn.cursor() as cur:  # the server reads a table in
            cur.execute("SELECT SUM(LENGTH(description)) FROM mysql.help_topic")
        table = server.datadir / "mysql" / "help_topic.MAD"
        assert cached_fraction([table]) > 0.5
        assert server.drop_cache()
        assert cached_fraction([table]) < 0.05
    assert cached_fraction([outside]) > 0.9  # the machine's cache is left as it was


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_the_client_runs_off_the_servers_cpus_and_says_where():
    mine = os.sched_getaffinity(0)
    first = min(mine)
    server = subprocess.Popen(["sleep", "60"],
                              preexec_fn=lambda: os.sched_setaffinity(0, {first}))
    try:
        with client_apart(server.pid) as where:
            child = subprocess.run([sys.executable, "-c",
                                    "import os; print(sorted(os.sched_getaffinity(0)))"],
                                   capture_output=True, text=True, check=True)
            assert json.loads(child.stdout) == sorted(mine - {first})  # programs inherit it
        assert where == {"server_cpus": str(first),
                         "client_cpus": format_cpu_list(mine - {first})}
        assert os.sched_getaffinity(0) == mine  # put back
    finally:
        server.kill()
        server.wait()
    # A server that may use every CPU leaves the client where it was, and says so.
    with client_apart(os.getpid()) as where:
        assert os.sched_getaffinity(0) == mine
    assert where["server_cpus"] == where["client_cpus"] == format_cpu_list(mine)
    with client_apart(None) as where:  # a server elsewhere: nothing is known of its CPUs
        assert where == {}
