"""The kernel's control groups: a sandbox given the shape of another machine.

A production box has 2 GB of memory, one CPU and a disk that reads 100 MB/s; the test box has
more of each, and a server tuned on it gets the big box's answer. A control group made for one
sandbox gives its processes only what the production box has: memory (page cache included),
which CPUs or how much of their time, and how fast one block device reads and writes.

Both kinds of hierarchy are found from the mounts, never assumed:

- cgroup v2 (one unified tree): the group is made under the group knoblab's own process is
  in, with the controllers it needs switched on in that group's cgroup.subtree_control. A
  group holding processes cannot switch controllers on for its children (the kernel's "no
  internal processes" rule), so knoblab first moves itself into a leaf of its own,
  knoblab-home-<pid>, where it is alone in its group (as under `systemd-run --scope -p
  Delegate=yes`); a group shared with other processes is refused, not rearranged.
- cgroup v1 (one mount per controller, or a few together): the group is made in each
  controller it needs (memory always: it tells the peak and the OOM kills), under the group
  knoblab's process is in within that controller.

Groups are named knoblab-<name>-<pid>, with the pid of the knoblab process that made them, so
that `reap` can remove the groups of a knoblab killed with -9.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path

from knoblab.errors import UserError
from knoblab.units import format_size

PREFIX = "knoblab-"
_OWNED = re.compile(r"^knoblab-.+-(\d+)$")
_HOME = re.compile(r"^knoblab-home-\d+$")
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
# The kernel refuses a CFS quota below 1 ms per period.
_MIN_QUOTA_US = 1000
_DEFAULT_PERIOD_US = 100_000
_HOW_TO_ALLOW = ("run knoblab as root, or under "
                 "`systemd-run --user --scope -p Delegate=yes knoblab ...`")
_IO_FIELDS = ("read_bps", "write_bps", "read_iops", "write_iops")
# The controller each kind of limit needs, by hierarchy version.
_CONTROLLERS = {
    1: {"memory": "memory", "cpus": "cpuset", "cpu_quota": "cpu", "io": "blkio"},
    2: {"memory": "memory", "cpus": "cpuset", "cpu_quota": "cpu", "io": "io"},
}
_KIND_WORDS = {"memory": "memory", "cpus": "CPUs", "cpu_quota": "CPU time", "io": "disk speed"}


@dataclass(frozen=True)
class Limits:
    """What a sandbox may use; None is no limit."""

    memory: int | None = None  # bytes, page cache included; swap cannot add to it
    cpus: tuple[int, ...] | None = None  # which CPUs (the caller picks them)
    cpu_quota: float | None = None  # CPUs' worth of time: 0.5 is half of one CPU
    read_bps: int | None = None  # bytes/s on `device`
    write_bps: int | None = None
    read_iops: int | None = None
    write_iops: int | None = None
    device: tuple[int, int] | None = None  # major, minor of the block device the io limits are on

    def kinds(self) -> list[str]:
        """The kinds of limit set: memory, cpus, cpu_quota, io."""
        kinds = [k for k in ("memory", "cpus", "cpu_quota") if getattr(self, k) is not None]
        if self.has_io():
            kinds.append("io")
        return kinds

    def has_io(self) -> bool:
        return any(getattr(self, f) is not None for f in _IO_FIELDS)

    def empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))


def device_of(path: Path, root: Path = Path("/")) -> tuple[int, int]:
    """The whole block device (major, minor) holding `path`, for io limits: a partition's disk,
    since the kernel throttles whole disks only. UserError when it is not on a block device
    (tmpfs, overlay, btrfs subvolumes have device numbers the kernel cannot throttle)."""
    try:
        dev = os.stat(path).st_dev
    except OSError as e:
        raise UserError(f"cannot limit the disk speed of {path}: {e.strerror}") from None
    major, minor = os.major(dev), os.minor(dev)
    sysfs = root / "sys/dev/block" / f"{major}:{minor}"
    if not sysfs.exists():
        raise UserError(f"cannot limit the disk speed of {path}: its file system is not on a "
                        f"block device (device {major}:{minor}: tmpfs, overlay or the like); "
                        "put it on a disk's file system")
    if (sysfs / "partition").exists():
        return _parse_device((sysfs.resolve().parent / "dev").read_text())
    return major, minor


def _parse_device(text: str) -> tuple[int, int]:
    major, minor = text.strip().split(":")
    return int(major), int(minor)


def parse_cpu_list(text: str) -> set[int]:
    """The CPUs of a kernel list such as "0-3,6"."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def format_cpu_list(cpus: set[int] | tuple[int, ...]) -> str:
    """The kernel's form of a set of CPUs, ranges joined: "0-3,6"."""
    runs: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(low) if low == high else f"{low}-{high}" for low, high in runs)


def _unescape(field: str) -> str:
    """A /proc/self/mounts field: spaces and the like are written as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


@dataclass(frozen=True)
class _Mount:
    point: Path  # under the root the hierarchy was found in
    kind: str  # "cgroup" or "cgroup2"
    options: frozenset[str]

    @property
    def read_only(self) -> bool:
        return "ro" in self.options


def _read(path: Path) -> str:
    return path.read_text()


def _write(path: Path, value: str) -> None:
    """Write one value to a control file; a value the kernel refuses is one line naming both."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)
    except OSError as e:
        hint = ""
        if e.errno == errno.EBUSY and path.name.startswith(("memory.limit", "memory.memsw")):
            used = _number(path.parent / "memory.usage_in_bytes")
            hint = (f" (its processes already use {used / 2**20:.0f} MiB; cgroup v1 cannot "
                    "set a memory limit below what they use)") if used is not None else ""
        raise UserError(f"the kernel refused {value.strip()!r} for {path}: "
                        f"{e.strerror or e}{hint}") from None


def _number(path: Path) -> int | None:
    try:
        return int(_read(path).split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _keyed(path: Path, key: str) -> int | None:
    """The value of `key` in a flat keyed file such as memory.events or memory.oom_control."""
    try:
        for line in _read(path).splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        return None
    return None


class Hierarchy:
    """How this machine's control groups can be used: which version, and where knoblab's
    groups go in each controller."""

    def __init__(self, version: int, root: Path, parents: dict[str, Path],
                 mounts: dict[str, _Mount]) -> None:
        self.version = version
        self.root = root
        # controller -> the group knoblab's own process is in, where its groups are made
        self.parents = parents
        self._mounts = mounts

    @classmethod
    def find(cls, root: Path = Path("/")) -> Hierarchy:
        """This machine's hierarchy, from /proc/self/mounts and /proc/self/cgroup under `root`.
        UserError, one line saying why and what would make it possible, where none is usable."""
        mounts = _read_mounts(root)
        membership = _read_membership(root)
        v2 = next((m for m in mounts if m.kind == "cgroup2"), None)
        v1: dict[str, _Mount] = {}
        for mount in mounts:
            if mount.kind == "cgroup":
                for option in mount.options:
                    v1.setdefault(option, mount)
        if v2 is not None and "" in membership:
            parent = _inside(v2, membership[""])
            if _HOME.match(parent.name):
                # Moved there by an earlier create() of this process: groups go beside it.
                parent = parent.parent
            controllers = _words(parent / "cgroup.controllers")
            if "memory" in controllers:
                hierarchy = cls(2, root, {c: parent for c in _CONTROLLERS[2].values()},
                                {c: v2 for c in _CONTROLLERS[2].values()})
                hierarchy._check_writable("memory")
                return hierarchy
        if "memory" in v1:
            parents: dict[str, Path] = {}
            for controller in _CONTROLLERS[1].values():
                if controller in v1:
                    parents[controller] = _inside(v1[controller],
                                                  membership.get(controller, "/"))
            hierarchy = cls(1, root, parents, {c: v1[c] for c in parents})
            hierarchy._check_writable("memory")
            return hierarchy
        if not mounts:
            raise UserError("cannot give the sandbox a machine shape: no control groups are "
                            f"mounted ({root / 'proc/self/mounts'} has neither cgroup2 nor "
                            "cgroup); mount cgroup2 on /sys/fs/cgroup, or run without [machine]")
        where = (f"cgroup v2 at {v2.point} does not offer it to this process's group"
                 if v2 is not None else "no cgroup v1 memory mount either")
        raise UserError(f"cannot give the sandbox a machine shape: the memory controller is "
                        f"not available ({where}); {_HOW_TO_ALLOW}")

    def _check_writable(self, controller: str) -> None:
        parent = self.parents[controller]
        mount = self._mounts[controller]
        if mount.read_only:
            reason = f"{mount.point} is mounted read-only"
        elif not parent.is_dir():
            reason = f"{parent} does not exist"
        elif not os.access(parent, os.W_OK | os.X_OK):
            reason = f"{parent} is not writable by uid {os.geteuid()}"
        elif self.version == 2 and not os.access(parent / "cgroup.subtree_control", os.W_OK):
            reason = f"{parent / 'cgroup.subtree_control'} is not writable by uid {os.geteuid()}"
        else:
            return
        raise UserError(f"cannot make control groups for the sandbox: {reason}; {_HOW_TO_ALLOW}")

    def available_cpus(self) -> set[int]:
        """The CPUs knoblab's own group may use."""
        parent = self.parents.get("cpuset")
        if parent is not None:
            name = "cpuset.cpus" if self.version == 1 else "cpuset.cpus.effective"
            for group in (parent, *parent.parents):
                try:
                    cpus = parse_cpu_list(_read(group / name))
                except (OSError, ValueError):
                    continue
                if cpus:
                    return cpus
                if group == self._mounts["cpuset"].point:
                    break
        return set(os.sched_getaffinity(0))

    def check(self, limits: Limits) -> None:
        """One line for a limit this machine cannot apply."""
        for kind in limits.kinds():
            controller = _CONTROLLERS[self.version][kind]
            if controller not in self.parents:
                raise UserError(f"cannot limit the sandbox's {_KIND_WORDS[kind]}: this "
                                f"machine's cgroup v1 has no {controller} controller mounted")
            if self.version == 2 and controller not in _words(
                    self.parents[controller] / "cgroup.controllers"):
                raise UserError(f"cannot limit the sandbox's {_KIND_WORDS[kind]}: the "
                                f"{controller} controller is not delegated to "
                                f"{self.parents[controller]} (not in its cgroup.controllers); "
                                f"{_HOW_TO_ALLOW}")
        if limits.memory is not None:
            _check_memory(limits.memory)
        available = self.available_cpus()
        if limits.cpus is not None:
            if not limits.cpus:
                raise UserError("cpus: the sandbox needs at least one CPU")
            beyond = sorted(set(limits.cpus) - available)
            if beyond:
                raise UserError(f"cpus {format_cpu_list(limits.cpus)}: this machine has "
                                f"{len(available)} CPUs for knoblab "
                                f"({format_cpu_list(available)}), not "
                                f"{format_cpu_list(tuple(beyond))}")
        if limits.cpu_quota is not None:
            if limits.cpu_quota * _DEFAULT_PERIOD_US < _MIN_QUOTA_US:
                raise UserError(f"cpu quota {limits.cpu_quota}: the kernel's least is "
                                f"{_MIN_QUOTA_US / _DEFAULT_PERIOD_US} of a CPU")
            if limits.cpu_quota > len(available):
                raise UserError(f"cpu quota {limits.cpu_quota}: this machine has "
                                f"{len(available)} CPUs for knoblab")
            if limits.cpus is not None and limits.cpu_quota > len(set(limits.cpus)):
                given = len(set(limits.cpus))
                raise UserError(f"cpu quota {limits.cpu_quota}: more than the {given} "
                                f"CPU{'s' if given > 1 else ''} the sandbox is given")
        if limits.has_io():
            if limits.device is None:
                raise UserError("disk limits need the block device they apply to")
            for name in _IO_FIELDS:
                value = getattr(limits, name)
                if value is not None and value <= 0:
                    raise UserError(f"{name.replace('_', ' ')} {value}: must be positive")
            sysfs = self.root / "sys/dev/block" / "{}:{}".format(*limits.device)
            if not sysfs.exists():
                raise UserError("disk limits: no block device {}:{} on this machine"
                                .format(*limits.device))
            if (sysfs / "partition").exists():
                raise UserError("disk limits: {}:{} is a partition; the kernel throttles whole "
                                "disks ({})".format(*limits.device, _read(
                                    sysfs.resolve().parent / "dev").strip()))

    def create(self, name: str, limits: Limits) -> Group:
        """A new group knoblab-<name>-<pid> with `limits` written; a value the kernel refuses is
        one line naming the file and value, and leaves no group behind."""
        if not _NAME.match(name):
            raise UserError(f"control group name {name!r}: letters, digits, '.', '_', '-' only")
        self.check(limits)
        group_name = f"{PREFIX}{name}-{os.getpid()}"
        controllers = ["memory", *(_CONTROLLERS[self.version][k] for k in limits.kinds())]
        made: list[Path] = []
        try:
            if self.version == 2:
                self._enable(set(controllers))
            for controller in controllers:
                path = self.parents[controller] / group_name
                if path in made:
                    continue
                try:
                    path.mkdir()
                except FileExistsError:
                    raise UserError(f"control group {path} already exists") from None
                except OSError as e:
                    raise UserError(f"cannot make control group {path}: {e.strerror}; "
                                    f"{_HOW_TO_ALLOW}") from None
                made.append(path)
            group = Group(self, group_name, tuple(made), self.parents["memory"] / group_name)
            if self.version == 1:
                self._limit_v1(group_name, limits)
            else:
                self._limit_v2(made[0], limits)
        except BaseException:
            for path in reversed(made):
                with contextlib.suppress(OSError):
                    path.rmdir()
            raise
        return group

    def _enable(self, controllers: set[str]) -> None:
        """Switch `controllers` on for the children of knoblab's own v2 group, moving the
        group's processes into a leaf first where the kernel requires it."""
        parent = self.parents["memory"]
        control = parent / "cgroup.subtree_control"
        missing = controllers - _words(control)
        if not missing:
            return
        at_top = parent == self._mounts["memory"].point
        procs = {int(pid) for pid in _words(parent / "cgroup.procs")}
        if procs and not at_top:
            import psutil  # here: `knoblab runs` reaps groups and needs none of it

            ours = {os.getpid(), *(child.pid for child in
                                   psutil.Process().children(recursive=True))}
            others = sorted(procs - ours)
            if others:
                # Moving a login's shell and the like into a group of knoblab's would take
                # them from the group systemd (or whoever made it) keeps them in.
                listed = ", ".join(map(str, others[:5])) + (" ..." if len(others) > 5 else "")
                raise UserError(f"cannot switch on {' '.join(sorted(missing))} for groups "
                                f"under {parent}: it holds other processes ({listed}), and "
                                "cgroup v2 gives no controllers to the children of a group "
                                "with processes; run knoblab in a group of its own: "
                                "`systemd-run --user --scope -p Delegate=yes knoblab ...`")
            home = parent / f"{PREFIX}home-{os.getpid()}"
            try:
                home.mkdir(exist_ok=True)
            except OSError as e:
                raise UserError(f"cannot make control group {home}: {e.strerror}; "
                                f"{_HOW_TO_ALLOW}") from None
            for pid in sorted(procs):
                with contextlib.suppress(UserError):
                    # One that exited meanwhile is gone; one still there fails the next step.
                    _write(home / "cgroup.procs", str(pid))
        _write(control, " ".join(f"+{c}" for c in sorted(missing)))

    def _limit_v1(self, group_name: str, limits: Limits) -> None:
        if "cpuset" in self.parents:
            cpuset = self.parents["cpuset"]
            if (cpuset / group_name).is_dir():
                # A v1 cpuset starts empty, and takes no process before it has CPUs and
                # memory nodes.
                cpus = (format_cpu_list(limits.cpus) if limits.cpus is not None
                        else _read(cpuset / "cpuset.cpus").strip())
                _write(cpuset / group_name / "cpuset.cpus", cpus)
                _write(cpuset / group_name / "cpuset.mems", _read(cpuset / "cpuset.mems").strip())
        if limits.memory is not None:
            _set_memory_v1(self.parents["memory"] / group_name, limits.memory)
        if limits.cpu_quota is not None:
            cpu = self.parents["cpu"] / group_name
            period = _number(cpu / "cpu.cfs_period_us") or _DEFAULT_PERIOD_US
            _write(cpu / "cpu.cfs_quota_us", str(round(limits.cpu_quota * period)))
        if limits.has_io() and limits.device is not None:
            blkio = self.parents["blkio"] / group_name
            device = "{}:{}".format(*limits.device)
            for name in _IO_FIELDS:
                value = getattr(limits, name)
                if value is not None:
                    _write(blkio / f"blkio.throttle.{name}_device", f"{device} {value}")

    def _limit_v2(self, group: Path, limits: Limits) -> None:
        if limits.cpus is not None:
            _write(group / "cpuset.cpus", format_cpu_list(limits.cpus))
        if limits.cpu_quota is not None:
            quota = round(limits.cpu_quota * _DEFAULT_PERIOD_US)
            _write(group / "cpu.max", f"{quota} {_DEFAULT_PERIOD_US}")
        if limits.memory is not None:
            _write(group / "memory.max", str(limits.memory))
            if (group / "memory.swap.max").exists():
                # Swap is memory the production box would not have.
                _write(group / "memory.swap.max", "0")
        if limits.has_io() and limits.device is not None:
            keys = {"read_bps": "rbps", "write_bps": "wbps",
                    "read_iops": "riops", "write_iops": "wiops"}
            settings = " ".join(f"{keys[name]}={getattr(limits, name)}" for name in _IO_FIELDS
                                if getattr(limits, name) is not None)
            _write(group / "io.max", "{}:{} {}".format(*limits.device, settings))

    def places(self) -> list[Path]:
        """The mount points of the controllers knoblab uses, where `reap` looks."""
        return sorted({m.point for m in self._mounts.values()})


def _check_memory(memory: int) -> None:
    page = os.sysconf("SC_PAGE_SIZE")
    total = page * os.sysconf("SC_PHYS_PAGES")
    if memory < page:
        # The kernel takes it, rounded down to no page at all.
        raise UserError(f"memory limit {memory} bytes: less than one page ({page} bytes)")
    if memory > total:
        raise UserError(f"memory limit {format_size(memory)}: this machine has only "
                        f"{total / 2**30:.1f} GiB, so the sandbox would not be limited")


def _set_memory_v1(group: Path, memory: int) -> None:
    limit, memsw = group / "memory.limit_in_bytes", group / "memory.memsw.limit_in_bytes"
    # memory+swap may never be below memory alone: raise it first when raising, after when
    # lowering; written equal, swap adds nothing to what the group may hold.
    current = _number(limit)
    has_memsw = memsw.exists()
    if has_memsw and current is not None and memory > current:
        _write(memsw, str(memory))
        _write(limit, str(memory))
    else:
        _write(limit, str(memory))
        if has_memsw:
            _write(memsw, str(memory))


def _inside(mount: _Mount, path: str) -> Path:
    """The directory of group `path` (as /proc/self/cgroup names it) in `mount`. A container
    without a cgroup namespace names its group from the host's top while its mount shows only
    that group: then the mount itself is the group."""
    group = mount.point / path.lstrip("/")
    return group if group.is_dir() else mount.point


def _words(path: Path) -> set[str]:
    try:
        return set(_read(path).split())
    except OSError:
        return set()


def _read_mounts(root: Path) -> list[_Mount]:
    try:
        text = _read(root / "proc/self/mounts")
    except OSError as e:
        raise UserError(f"cannot read {root / 'proc/self/mounts'}: {e.strerror}") from None
    mounts = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
            point = root / _unescape(parts[1]).lstrip("/")
            mounts.append(_Mount(point, parts[2], frozenset(parts[3].split(","))))
    return mounts


def _read_membership(root: Path) -> dict[str, str]:
    """controller -> the path of knoblab's group in it; "" for the v2 hierarchy."""
    try:
        text = _read(root / "proc/self/cgroup")
    except OSError as e:
        raise UserError(f"cannot read {root / 'proc/self/cgroup'}: {e.strerror}") from None
    membership: dict[str, str] = {}
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        if not path:
            continue
        for controller in controllers.split(",") if controllers else [""]:
            membership[controller] = path
    return membership


class Group:
    """One control group, in every controller it limits."""

    def __init__(self, hierarchy: Hierarchy, name: str, paths: tuple[Path, ...],
                 memory: Path) -> None:
        self.hierarchy = hierarchy
        self.name = name
        self.paths = paths
        self._memory = memory
        # Ready for join() in a child between fork and exec: nothing left to compute there.
        self._procs = tuple(os.fsencode(path / "cgroup.procs") for path in paths)

    def join(self) -> None:
        """Move the calling process into the group in every controller. Safe in a subprocess
        preexec_fn: no locks, no logging, only a few system calls."""
        pid = str(os.getpid()).encode()
        for procs in self._procs:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    def set_memory(self, memory: int) -> None:
        """Change the memory limit of a group in use; one line where the kernel refuses it (v1
        cannot go below what the group's processes already use)."""
        _check_memory(memory)
        if self.hierarchy.version == 1:
            _set_memory_v1(self._memory, memory)
        else:
            _write(self._memory / "memory.max", str(memory))

    def drop_cache(self) -> bool:
        """Empty the group's own page cache, leaving the rest of the machine's; False where the
        kernel cannot (no memory.force_empty in v1, no memory.reclaim in v2)."""
        if self.hierarchy.version == 1:
            target, amount = self._memory / "memory.force_empty", "0"
        else:
            target = self._memory / "memory.reclaim"
            amount = str(_keyed(self._memory / "memory.stat", "file") or 0)
            if amount == "0":
                return target.exists()
        try:
            fd = os.open(target, os.O_WRONLY)
        except OSError:
            return False
        try:
            os.write(fd, amount.encode())
        except OSError as e:
            # v2 says EAGAIN when it reclaimed less than asked: what is left is in use.
            return e.errno == errno.EAGAIN
        finally:
            os.close(fd)
        return True

    def peak_memory(self) -> int | None:
        """The most memory the group has held, page cache included, in bytes."""
        name = "memory.max_usage_in_bytes" if self.hierarchy.version == 1 else "memory.peak"
        return _number(self._memory / name)

    def memory(self) -> int | None:
        """The memory the group holds now, page cache included, in bytes."""
        name = "memory.usage_in_bytes" if self.hierarchy.version == 1 else "memory.current"
        return _number(self._memory / name)

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the group for want of memory."""
        name = "memory.oom_control" if self.hierarchy.version == 1 else "memory.events"
        return (_keyed(self._memory / name, "oom_kill") or 0) > 0

    def pids(self) -> set[int]:
        """The processes in the group, in any of its controllers."""
        return {int(p) for path in self.paths for p in _words(path / "cgroup.procs")}

    def remove(self, timeout: float = 10.0) -> None:
        """Remove the group from every controller once its processes are gone, waiting up to
        `timeout` seconds for them; kills nothing. UserError if some are still there."""
        deadline = time.monotonic() + timeout
        for path in reversed(self.paths):
            while True:
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY or time.monotonic() > deadline:
                        left = ", ".join(sorted(_words(path / "cgroup.procs"))) or "none listed"
                        raise UserError(f"cannot remove control group {path}: {e.strerror} "
                                        f"(processes {left}); knoblab removes it at its next "
                                        "start once they are gone") from None
                    # A process that just exited leaves its group a moment later.
                    time.sleep(0.02)

    def __repr__(self) -> str:
        return f"Group({self.name!r}, v{self.hierarchy.version})"


def _owned_groups(place: Path, depth: int = 8) -> Iterator[Path]:
    """knoblab's groups anywhere under `place`: not only under this process's own group, since
    a knoblab killed in another login left its groups under that login's."""
    try:
        entries = list(os.scandir(place))
    except OSError:
        return
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        if entry.name.startswith(PREFIX):
            yield Path(entry.path)
        elif depth > 0:
            yield from _owned_groups(Path(entry.path), depth - 1)


def reap(hierarchy: Hierarchy, alive: Callable[[int], bool]) -> int:
    """Remove the groups left by knoblab processes that died (kill -9): their names end with
    the owner's pid, and `alive` says which pids still run. A group still holding processes is
    left. Returns how many groups (by name) were removed."""
    removed: set[str] = set()
    for place in hierarchy.places():
        for path in _owned_groups(place):
            match = _OWNED.match(path.name)
            if match is None or alive(int(match.group(1))):
                continue
            try:
                path.rmdir()
            except OSError:
                continue
            removed.add(path.name)
    return len(removed)


def reap_left_behind(alive: Callable[[int], bool], root: Path = Path("/")) -> int:
    """`reap` on this machine's hierarchy, for a command that starts no sandbox (`knoblab
    runs`); 0 where there is none knoblab may use (no control groups, or no right to remove
    its groups)."""
    try:
        hierarchy = Hierarchy.find(root)
    except UserError:
        return 0
    return reap(hierarchy, alive)


@contextlib.contextmanager
def client_apart(server_pid: int | None) -> Iterator[dict[str, str]]:
    """Around one measurement: the calling thread, and every client it starts (threads and
    programs inherit it), kept off the CPUs the server is confined to ([machine] cpus puts a
    sandbox on the first ones), when any are left; so that the client does not take the
    server's CPUs from it. Yields where each ran, for the measurement's details: the server's
    CPUs and the client's (the same ones when the server may use them all)."""
    mine = os.sched_getaffinity(0)
    try:
        server = os.sched_getaffinity(server_pid) if server_pid else None
    except OSError:  # gone, or another user's: where it runs is not known here
        server = None
    if server is None:
        yield {}
        return
    apart = mine - server
    where = {"server_cpus": format_cpu_list(server), "client_cpus": format_cpu_list(apart or mine)}
    if not apart:
        yield where
        return
    os.sched_setaffinity(0, apart)
    try:
        yield where
    finally:
        os.sched_setaffinity(0, mine)
