"""knoblab.server.cgroups: cgroup v1 for real (this machine has its controllers writable as
root), cgroup v2 against a directory tree laid out like one, and the refusals, one line each.

Every group a test makes is removed by the `made` fixture, also when the test fails, and the
fixture then looks for anything named after this process left in /sys/fs/cgroup.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from knoblab.errors import UserError
from knoblab.server import cgroups
from knoblab.server.cgroups import Group, Hierarchy, Limits, device_of, reap

MiB = 1 << 20
REPO = Path(__file__).resolve().parent.parent
CGROUP_FS = Path("/sys/fs/cgroup")


def _v1() -> Hierarchy | None:
    if os.geteuid() != 0:
        return None
    try:
        hierarchy = Hierarchy.find()
    except UserError:
        return None
    return hierarchy if hierarchy.version == 1 else None


V1 = _v1()
needs_v1 = pytest.mark.skipif(V1 is None, reason="needs root and writable cgroup v1 controllers")


def _ours() -> list[str]:
    found = []
    for top, dirs, _ in os.walk(CGROUP_FS):
        found += [os.path.join(top, d) for d in dirs
                  if d.startswith("knoblab-") and d.endswith(f"-{os.getpid()}")]
    return found


@pytest.fixture
def made() -> Iterator[list[Group]]:
    """Groups made by the test; removed afterwards, their processes (the test's children)
    killed first."""
    groups: list[Group] = []
    yield groups
    for group in groups:
        for pid in group.pids():
            try:
                ours = psutil.Process(pid).ppid() == os.getpid()
            except psutil.NoSuchProcess:
                continue
            if ours:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        group.remove()
    if V1 is not None:
        assert _ours() == []


def _child(group: Group, code: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], preexec_fn=group.join,
                          capture_output=True, text=True, timeout=60, **kwargs)  # type: ignore


def _stat(group: Group, key: str) -> int:
    for line in (group.paths[0] / "memory.stat").read_text().splitlines():
        name, value = line.split()
        if name == key:
            return int(value)
    raise AssertionError(f"no {key} in memory.stat")


@needs_v1
def test_v1_group_holds_its_process_and_limits(made: list[Group]) -> None:
    assert V1 is not None
    disk = device_of(Path("/"))
    group = V1.create("shape", Limits(memory=256 * MiB, cpus=(0,), cpu_quota=0.5,
                                      read_bps=10_000_000, device=disk))
    made.append(group)
    assert group.name == f"knoblab-shape-{os.getpid()}"
    by_controller = {path.parent: path for path in group.paths}
    memory = by_controller[V1.parents["memory"]]
    assert (memory / "memory.limit_in_bytes").read_text() == f"{256 * MiB}\n"
    # memory+swap at the same value: swap cannot add to what the sandbox holds
    assert (memory / "memory.memsw.limit_in_bytes").read_text() == f"{256 * MiB}\n"
    cpuset = by_controller[V1.parents["cpuset"]]
    assert (cpuset / "cpuset.cpus").read_text() == "0\n"
    assert (cpuset / "cpuset.mems").read_text().strip() != ""
    cpu = by_controller[V1.parents["cpu"]]
    assert (cpu / "cpu.cfs_quota_us").read_text() == "50000\n"
    assert (cpu / "cpu.cfs_period_us").read_text() == "100000\n"
    blkio = by_controller[V1.parents["blkio"]]
    assert (blkio / "blkio.throttle.read_bps_device").read_text() == \
        "{}:{} 10000000\n".format(*disk)

    child = _child(group, "import os; print(open('/proc/self/cgroup').read());"
                          "print(sorted(os.sched_getaffinity(0)))")
    assert child.returncode == 0, child.stderr
    lines = child.stdout.splitlines()
    membership = {line.split(":")[1]: line.split(":")[2] for line in lines if ":" in line}
    for controller in ("memory", "cpuset", "cpu", "blkio"):
        assert membership[controller].endswith("/" + group.name), (controller, membership)
    assert not membership["pids"].endswith(group.name)  # only the controllers it limits
    assert lines[-1] == "[0]"  # the CPU it was given
    # the knoblab process itself stays outside its sandbox's limits
    assert group.name not in Path("/proc/self/cgroup").read_text()

    paths = group.paths
    group.remove()
    assert not any(path.exists() for path in paths)


@needs_v1
def test_v1_memory_beyond_the_limit_is_oom_killed(made: list[Group]) -> None:
    assert V1 is not None
    group = V1.create("oom", Limits(memory=64 * MiB))
    made.append(group)
    assert not group.oom_killed()
    small = _child(group, "x = b'1' * (16 << 20)")
    assert small.returncode == 0, small.stderr
    peak = group.peak_memory()
    assert peak is not None and 16 * MiB <= peak <= 64 * MiB
    assert not group.oom_killed()

    big = _child(group, "x = b'1' * (256 << 20)")
    assert big.returncode == -signal.SIGKILL
    assert group.oom_killed()


@needs_v1
def test_v1_drop_cache_empties_only_the_groups_page_cache(made: list[Group],
                                                          tmp_path: Path) -> None:
    assert V1 is not None
    group = V1.create("cache", Limits(memory=256 * MiB))
    made.append(group)
    data = tmp_path / "data"
    # Written and synced from inside the group: its page cache is charged to the group.
    child = _child(group, f"import os\nwith open({str(data)!r}, 'wb') as f:\n"
                          "    f.write(os.urandom(16 << 20)); f.flush(); os.fsync(f.fileno())\n"
                          f"open({str(data)!r}, 'rb').read()")
    assert child.returncode == 0, child.stderr
    assert _stat(group, "cache") >= 16 * MiB
    assert group.drop_cache()
    assert _stat(group, "cache") < 4 * MiB


@needs_v1
def test_v1_memory_limit_below_what_the_group_uses_is_refused(made: list[Group]) -> None:
    assert V1 is not None
    group = V1.create("busy", Limits(memory=256 * MiB))
    made.append(group)
    holder = subprocess.Popen([sys.executable, "-c", "import sys; x = b'1' * (64 << 20); "
                               "print('ready', flush=True); sys.stdin.read()"],
                              preexec_fn=group.join, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
        with pytest.raises(UserError) as refused:
            group.set_memory(16 * MiB)
        message = str(refused.value)
        assert "\n" not in message
        assert "memory.limit_in_bytes" in message and str(16 * MiB) in message
        assert "below what they use" in message
        # the limit it had stays
        assert (group.paths[0] / "memory.limit_in_bytes").read_text() == f"{256 * MiB}\n"
        group.set_memory(128 * MiB)
        assert (group.paths[0] / "memory.limit_in_bytes").read_text() == f"{128 * MiB}\n"
    finally:
        holder.kill()
        holder.communicate()


@needs_v1
def test_remove_waits_for_processes_and_kills_none(made: list[Group]) -> None:
    assert V1 is not None
    group = V1.create("held", Limits(memory=64 * MiB))
    made.append(group)
    holder = subprocess.Popen(["sleep", "60"], preexec_fn=group.join)
    try:
        with pytest.raises(UserError, match=f"cannot remove control group .*{holder.pid}") as no:
            group.remove(timeout=0.1)
        assert "\n" not in str(no.value)
        assert holder.poll() is None
        assert all(path.exists() for path in group.paths)
    finally:
        holder.kill()
        holder.wait()
    group.remove()
    assert not any(path.exists() for path in group.paths)


@needs_v1
def test_v1_value_the_kernel_refuses_leaves_no_group(monkeypatch: pytest.MonkeyPatch) -> None:
    assert V1 is not None
    cpus = V1.available_cpus()
    missing = max(cpus) + 1
    # Past the check, as if it had been told of a CPU the kernel does not have.
    monkeypatch.setattr(Hierarchy, "available_cpus", lambda self: cpus | {missing})
    with pytest.raises(UserError) as refused:
        V1.create("refused", Limits(memory=64 * MiB, cpus=(missing,)))
    message = str(refused.value)
    assert "\n" not in message
    assert "cpuset.cpus" in message and f"'{missing}'" in message
    assert _ours() == []


@needs_v1
def test_v1_refusals() -> None:
    assert V1 is not None
    count = len(V1.available_cpus())
    with pytest.raises(UserError, match=f"this machine has {count} CPUs"):
        V1.check(Limits(cpus=(0, count)))
    with pytest.raises(UserError, match=f"has {count} CPUs"):
        V1.check(Limits(cpu_quota=count + 1.0))
    with pytest.raises(UserError, match="more than the 1 CPU the sandbox is given"):
        V1.check(Limits(cpus=(0,), cpu_quota=1.5))
    with pytest.raises(UserError, match="kernel's least"):
        V1.check(Limits(cpu_quota=0.001))
    with pytest.raises(UserError, match="need the block device"):
        V1.check(Limits(read_bps=1_000_000))
    with pytest.raises(UserError, match=r"memory limit \d+T: this machine has only .* GiB"):
        V1.check(Limits(memory=1 << 60))
    with pytest.raises(UserError, match="less than one page"):
        V1.check(Limits(memory=1))
    with pytest.raises(UserError, match="letters, digits"):
        V1.create("a/b", Limits())
    assert _ours() == []


@needs_v1
def test_reap_removes_groups_whose_owner_died(made: list[Group]) -> None:
    assert V1 is not None
    # The "dead" owner is a live process that only this test's reap takes for dead: another
    # knoblab reaping meanwhile (tests running beside these) leaves its groups alone.
    owner = subprocess.Popen(["sleep", "60"])
    left = V1.parents["memory"] / f"knoblab-left-{owner.pid}"
    also = V1.parents["cpu"] / f"knoblab-left-{owner.pid}"
    busy_dir = V1.parents["memory"] / f"knoblab-busy-{owner.pid}"
    busy = None
    try:
        left.mkdir()
        also.mkdir()
        # One of the dead owner's groups still holds a process: that one stays.
        busy_dir.mkdir()
        busy = subprocess.Popen(["sleep", "60"],
                                preexec_fn=lambda: busy_dir.joinpath("cgroup.procs").write_text(
                                    str(os.getpid())))
        live = V1.create("live", Limits(memory=64 * MiB))
        made.append(live)

        def alive(pid: int) -> bool:
            return pid != owner.pid

        # Counted once for its two controllers; the others' groups are not touched.
        assert reap(V1, alive) == 1
        assert not left.exists() and not also.exists()
        assert busy_dir.exists()
        assert all(path.exists() for path in live.paths)
        busy.kill()
        busy.wait()
        assert reap(V1, alive) == 1
        assert not busy_dir.exists()
    finally:
        for process in (busy, owner):
            if process is not None:
                process.kill()
                process.wait()
        for path in (left, also, busy_dir):
            if path.exists():
                path.rmdir()


def test_device_of() -> None:
    major, minor = device_of(Path("/"))
    assert Path(f"/sys/dev/block/{major}:{minor}").exists()
    with pytest.raises(UserError, match="not on a block device"):
        device_of(Path("/proc/self"))


def test_device_of_a_partition_is_its_disk(tmp_path: Path) -> None:
    dev = os.stat(tmp_path).st_dev
    disk = tmp_path / "sys/devices/virtual/block/vdz"
    (disk / "vdz1").mkdir(parents=True)
    (disk / "dev").write_text("252:0\n")
    (disk / "vdz1/partition").write_text("1\n")
    (tmp_path / "sys/dev/block").mkdir(parents=True)
    (tmp_path / f"sys/dev/block/{os.major(dev)}:{os.minor(dev)}").symlink_to(disk / "vdz1")
    assert device_of(tmp_path, root=tmp_path) == (252, 0)


# cgroup v2, against a tree laid out like the kernel's ------------------------------------

def _fake_v2(root: Path, controllers: str = "cpuset cpu io memory pids",
             procs: str = f"{os.getpid()}\n") -> Path:
    top = root / "sys/fs/cgroup"
    ours = top / "user.slice/user-1000.slice/knoblab.scope"
    ours.mkdir(parents=True)
    for group in (top, top / "user.slice", top / "user.slice/user-1000.slice", ours):
        (group / "cgroup.controllers").write_text(controllers + "\n")
        (group / "cgroup.subtree_control").write_text("")
        (group / "cgroup.procs").write_text("")
    (top / "cpuset.cpus.effective").write_text("0-3\n")
    (ours / "cpuset.cpus.effective").write_text("0-3\n")
    (ours / "cgroup.procs").write_text(procs)
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/mounts").write_text(
        "/dev/vda / ext4 rw,relatime 0 0\n"
        "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n")
    (root / "proc/self/cgroup").write_text("0::/user.slice/user-1000.slice/knoblab.scope\n")
    (root / "sys/dev/block/259:0").mkdir(parents=True)
    return ours


def _kernel_files(group: Path, **files: str) -> None:
    """What the kernel would have put in a group mkdir made."""
    for name, text in files.items():
        (group / name.replace("_", ".", 1)).write_text(text)


def test_v2_group_is_made_under_a_leaf_for_the_delegated_processes(tmp_path: Path) -> None:
    ours = _fake_v2(tmp_path)
    hierarchy = Hierarchy.find(root=tmp_path)
    assert hierarchy.version == 2
    assert hierarchy.parents["memory"] == ours
    group = hierarchy.create("shape", Limits(memory=512 * MiB, cpus=(1, 2, 3), cpu_quota=1.5,
                                             read_bps=100_000_000, write_iops=500,
                                             device=(259, 0)))
    path = ours / f"knoblab-shape-{os.getpid()}"
    assert group.paths == (path,)
    # The delegated group held knoblab's process: moved into a leaf first, then controllers
    # switched on for its children (the kernel refuses them in a group with processes).
    home = ours / f"knoblab-home-{os.getpid()}"
    assert (home / "cgroup.procs").read_text() == str(os.getpid())
    assert (ours / "cgroup.subtree_control").read_text() == "+cpu +cpuset +io +memory"
    assert (path / "memory.max").read_text() == str(512 * MiB)
    assert (path / "cpuset.cpus").read_text() == "1-3"
    assert (path / "cpu.max").read_text() == "150000 100000"
    assert (path / "io.max").read_text() == "259:0 rbps=100000000 wiops=500"

    _kernel_files(path, cgroup_procs="", memory_reclaim="", memory_peak="123456789\n",
                  memory_stat="anon 1000\nfile 5242880\n", memory_events="oom 0\noom_kill 0\n")
    group.join()
    assert (path / "cgroup.procs").read_text() == str(os.getpid())
    assert group.drop_cache()
    assert (path / "memory.reclaim").read_text() == "5242880"
    assert group.peak_memory() == 123456789
    assert not group.oom_killed()
    (path / "memory.events").write_text("oom 1\noom_kill 1\n")
    assert group.oom_killed()


def test_v2_groups_go_beside_the_leaf_knoblab_was_moved_to(tmp_path: Path) -> None:
    ours = _fake_v2(tmp_path)
    home = ours / f"knoblab-home-{os.getpid()}"
    home.mkdir()
    (tmp_path / "proc/self/cgroup").write_text(
        f"0::/user.slice/user-1000.slice/knoblab.scope/{home.name}\n")
    assert Hierarchy.find(root=tmp_path).parents["memory"] == ours


def test_v2_group_shared_with_other_processes_is_refused(tmp_path: Path) -> None:
    ours = _fake_v2(tmp_path, procs=f"{os.getpid()}\n4242\n")
    hierarchy = Hierarchy.find(root=tmp_path)
    with pytest.raises(UserError, match=r"holds other processes \(4242\).*systemd-run") as no:
        hierarchy.create("shared", Limits(memory=64 * MiB))
    assert "\n" not in str(no.value)
    assert [p.name for p in ours.iterdir() if p.is_dir()] == []
    assert (ours / "cgroup.subtree_control").read_text() == ""


def test_v2_at_the_top_needs_no_leaf(tmp_path: Path) -> None:
    _fake_v2(tmp_path)
    (tmp_path / "proc/self/cgroup").write_text("0::/\n")
    top = tmp_path / "sys/fs/cgroup"
    (top / "cgroup.procs").write_text("1\n")
    (top / "cgroup.subtree_control").write_text("memory\n")
    hierarchy = Hierarchy.find(root=tmp_path)
    with pytest.raises(UserError, match="no block device 8:0 on this machine"):
        hierarchy.check(Limits(read_bps=1, device=(8, 0)))
    group = hierarchy.create("top", Limits(memory=64 * MiB))
    assert group.paths == (top / f"knoblab-top-{os.getpid()}",)
    assert not list(top.glob("knoblab-home-*"))
    assert (top / "cgroup.subtree_control").read_text() == "memory\n"  # already on
    # The kernel lacks memory.reclaim (before 5.19): no cold cache through the group.
    assert not group.drop_cache()
    assert group.peak_memory() is None


def test_v2_controller_not_delegated(tmp_path: Path) -> None:
    _fake_v2(tmp_path, controllers="memory pids")
    hierarchy = Hierarchy.find(root=tmp_path)
    with pytest.raises(UserError, match="cpuset controller is not delegated to .*systemd-run"):
        hierarchy.check(Limits(cpus=(0,)))
    with pytest.raises(UserError, match="disk speed: the io controller is not delegated"):
        hierarchy.check(Limits(read_bps=1, device=(259, 0)))
    hierarchy.check(Limits(memory=MiB))


def test_v2_without_memory_and_no_v1_is_refused(tmp_path: Path) -> None:
    _fake_v2(tmp_path, controllers="pids")
    with pytest.raises(UserError, match="memory controller is not available"):
        Hierarchy.find(root=tmp_path)


def test_v1_found_beside_an_empty_v2(tmp_path: Path) -> None:
    """This machine's layout: v1 controllers, and a v2 tree that has none of them."""
    top = tmp_path / "sys/fs/cgroup"
    for name in ("cpu,cpuacct", "cpuset", "memory", "blkio", "unified"):
        (top / name).mkdir(parents=True)
    (top / "unified/cgroup.controllers").write_text("\n")
    (top / "memory/session").mkdir()
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/mounts").write_text(
        "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,relatime,cpu,cpuacct 0 0\n"
        "cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0\n"
        "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n"
        "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n")
    # cpuset named from the host's top, as in a container without a cgroup namespace: the
    # mount shows only the container's own group
    (tmp_path / "proc/self/cgroup").write_text(
        "4:memory:/session\n3:cpuset:/docker/4f1c\n2:cpu,cpuacct:/\n0::/\n")
    hierarchy = Hierarchy.find(root=tmp_path)
    assert hierarchy.version == 1
    assert hierarchy.parents == {"memory": top / "memory/session", "cpuset": top / "cpuset",
                                 "cpu": top / "cpu,cpuacct"}
    with pytest.raises(UserError, match="no blkio controller mounted"):
        hierarchy.check(Limits(read_bps=1, device=(259, 0)))


def test_no_cgroups_mounted(tmp_path: Path) -> None:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/mounts").write_text("/dev/vda / ext4 rw 0 0\n")
    (tmp_path / "proc/self/cgroup").write_text("0::/\n")
    with pytest.raises(UserError, match="no control groups are mounted") as refused:
        Hierarchy.find(root=tmp_path)
    assert "\n" not in str(refused.value)


def test_read_only_mount_is_refused(tmp_path: Path) -> None:
    (tmp_path / "sys/fs/cgroup/memory").mkdir(parents=True)
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/mounts").write_text(
        "cgroup /sys/fs/cgroup/memory cgroup ro,nosuid,memory 0 0\n")
    (tmp_path / "proc/self/cgroup").write_text("4:memory:/\n")
    with pytest.raises(UserError, match="mounted read-only; run knoblab as root, or under "
                                        "`systemd-run --user --scope -p Delegate=yes"):
        Hierarchy.find(root=tmp_path)


# The venv's interpreter may live where nobody cannot read (/root); the module needs only the
# standard library, so the system's Python runs it.
SYSTEM_PYTHON = Path("/usr/bin/python3")


@pytest.mark.skipif(os.geteuid() != 0 or not SYSTEM_PYTHON.exists(),
                    reason="needs root to run a child as nobody, and a system Python")
def test_a_user_without_delegation_is_refused() -> None:
    child = subprocess.run(
        [str(SYSTEM_PYTHON), "-c",
         "from knoblab.errors import UserError\n"
         "from knoblab.server.cgroups import Hierarchy\n"
         "try:\n    Hierarchy.find()\nexcept UserError as e:\n    print(e)\n"],
        user="nobody", cwd=REPO, env={"PATH": os.environ["PATH"],
                          "PYTHONPATH": f"{REPO}:{sysconfig.get_paths()['purelib']}"},
        capture_output=True, text=True, timeout=60)
    assert child.returncode == 0, child.stderr
    lines = child.stdout.splitlines()
    assert len(lines) == 1, child.stdout
    assert "not writable by uid" in lines[0] and "run knoblab as root" in lines[0]


def test_cpu_lists() -> None:
    assert cgroups.parse_cpu_list("0-3,6\n") == {0, 1, 2, 3, 6}
    assert cgroups.format_cpu_list((6, 0, 1, 2, 3)) == "0-3,6"
    assert cgroups.format_cpu_list((1, 3)) == "1,3"
