"""What a machine is, as far as a measurement's numbers depend on it.

Workers tuning one study together must be alike: a trial scored on a 4-core machine says
nothing about a 2-core one. The fingerprint holds what changes the numbers (the CPU, its cores,
the memory, the disk under knoblab's home, the kernel, the server's build), not what is unique
to a host (its name, its serial numbers), so that identical machines have identical prints.
"""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path

import psutil

# "shape": what [machine] gave the sandboxes, when it gave anything.
FIELDS = ("cpu", "cores", "memory", "disk", "kernel", "server", "shape")


def fingerprint(home: Path, server: str) -> dict[str, str]:
    """This machine's fingerprint, with `server` the version of the server under test."""
    return {
        "cpu": _cpu_model(),
        "cores": str(os.cpu_count() or 0),
        # Rounded: two machines of one type report totals a few MB apart.
        "memory": f"{round(psutil.virtual_memory().total / 2**30)} GiB",
        "disk": _disk(home),
        "kernel": platform.release(),
        "server": server,
    }


def describe(home: Path) -> dict[str, str]:
    """What a report's reader asks first ("what CPU cache, what disk?"): the fingerprint's
    machine fields, and the CPU caches and the virtualisation, which do not decide whether two
    machines may share a study but do explain a number."""
    return {**{k: v for k, v in fingerprint(home, "").items() if k != "server"},
            "caches": _caches(), "virtualisation": _virtualisation()}


def differences(here: dict[str, str], there: dict[str, str]) -> list[str]:
    """What differs, as "cores: 2 here, 4 there"; empty when the machines are alike."""
    def said(machine: dict[str, str], name: str) -> str:
        return machine.get(name, "no limits" if name == "shape" else "?")

    return [f"{name}: {said(here, name)} here, {said(there, name)} there"
            for name in FIELDS if here.get(name) != there.get(name)]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _disk(home: Path) -> str:
    """The file system under `home` and whether its device spins."""
    path = home.resolve()
    while not path.exists():
        path = path.parent
    best = None
    for part in psutil.disk_partitions(all=False):
        if str(path).startswith(part.mountpoint) and \
                (best is None or len(part.mountpoint) > len(best.mountpoint)):
            best = part
    if best is None:
        return "unknown"
    device = Path(best.device).name
    kind = "unknown"
    for name in (device, device.rstrip("0123456789"), device.rsplit("p", 1)[0]):
        rotational = Path(f"/sys/block/{name}/queue/rotational")
        if rotational.exists():
            kind = "rotating" if rotational.read_text().strip() == "1" else "solid-state"
            break
    return f"{best.fstype}, {kind}"


def filesystem(folder: Path) -> dict[str, str]:
    """The file system `folder` is on: its type, mount options, device and mount point, and
    for ext4 its journalling ("data=ordered", "data=journal", "data=writeback", or "none"):
    the mount options leave the default data=ordered out, the kernel's own list for the
    device has it, and a file system made without a journal has no journal thread."""
    path = folder.resolve()
    while not path.exists():
        path = path.parent
    best = None
    for part in psutil.disk_partitions(all=True):
        if path.is_relative_to(part.mountpoint) and \
                (best is None or len(part.mountpoint) > len(best.mountpoint)):
            best = part
    if best is None:
        return {"type": "unknown", "options": "", "device": "", "mount": "", "journal": ""}
    options = best.opts.split(",") if best.opts else []
    journal = ""
    if best.fstype == "ext4":
        device = Path(best.device).resolve().name
        try:
            listed = options + Path(f"/proc/fs/ext4/{device}/options").read_text().split()
            journal = next((o for o in listed if o.startswith("data=")), "")
            if not journal and Path(f"/sys/fs/ext4/{device}/journal_task").read_text() \
                    .strip() == "<none>":
                journal = "none"
        except OSError:
            journal = next((o for o in options if o.startswith("data=")), "")
    return {"type": best.fstype, "options": ",".join(options), "device": best.device,
            "mount": best.mountpoint, "journal": journal}


def filesystem_text(found: dict[str, str]) -> str:
    """"ext4 (data=journal) on /dev/loop3": the type, its journalling, the device."""
    journal = found.get("journal") or ""
    said = {"": "", "none": " (no journal)"}.get(journal, f" ({journal})")
    device = found.get("device") or ""
    return found.get("type", "unknown") + said + \
        (f" on {device}" if device and device != found.get("type") else "")


def _caches() -> str:
    """The first CPU's caches, as "L1d 32K, L1i 32K, L2 512K, L3 32M"."""
    found = []
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level, kind, size = ((index / name).read_text().strip()
                                 for name in ("level", "type", "size"))
        except OSError:
            continue
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        if size.endswith("K") and size[:-1].isdigit() and int(size[:-1]) % 1024 == 0:
            size = f"{int(size[:-1]) // 1024}M"
        found.append(f"L{level}{suffix} {size}")
    return ", ".join(found) or "unknown"


def _virtualisation() -> str:
    """"none", the hypervisor or container systemd names, or "virtual machine" when only the
    CPU says so."""
    try:
        found = subprocess.run(["systemd-detect-virt"], capture_output=True, text=True,
                               timeout=5, check=False).stdout.strip()
        if found:
            return found
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    return "virtual machine" if " hypervisor" in flags else "none"



# Cores that other programs may keep busy, on the average, while a measurement is taken
# before it is said to have run beside other load (an idle cloud VM shows a few hundredths).
# KNOBLAB_BUSY_BESIDE sets another figure, for a machine whose other load is known and
# accepted (knoblab's own tests, which run side by side).
def _busy_beside() -> float:
    try:
        return float(os.environ.get("KNOBLAB_BUSY_BESIDE") or 0.25)
    except ValueError:
        return 0.25


BUSY_BESIDE = _busy_beside()


class OthersLoad:
    """The CPU time programs other than this one used while it measured: the machine's busy
    time less that of this process and its descendants (its sandbox servers, the load's
    clients, whether still running or already reaped), in cores on the average."""

    def __init__(self) -> None:
        self.began = self._now()
        self.cores: float | None = None

    @staticmethod
    def _now() -> tuple[float, float, float]:
        machine = psutil.cpu_times()
        busy = sum(getattr(machine, f, 0.0) for f in ("user", "nice", "system", "irq",
                                                       "softirq"))
        me = psutil.Process()
        ours = sum(os.times()[:4])  # this process, and the children it has reaped
        for child in me.children(recursive=True):
            try:
                times = child.cpu_times()
            except psutil.Error:
                continue  # gone meanwhile: counted once reaped
            ours += times.user + times.system
        return time.monotonic(), busy, ours

    def end(self) -> float:
        """The other programs' cores, from the start to now (kept in `cores`)."""
        began, busy, ours = self.began
        now, busy_now, ours_now = self._now()
        seconds = max(now - began, 1e-6)
        self.cores = max(0.0, (busy_now - busy) - (ours_now - ours)) / seconds
        return self.cores
