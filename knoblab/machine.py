"""What a machine is, as far as a measurement's numbers depend on it.

Workers tuning one study together must be alike: a trial scored on a 4-core machine says
nothing about a 2-core one. The fingerprint holds what changes the numbers (the CPU, its cores,
the memory, the disk under knoblab's home, the kernel, the server's build), not what is unique
to a host (its name, its serial numbers), so that identical machines have identical prints.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import psutil

FIELDS = ("cpu", "cores", "memory", "disk", "kernel", "server")


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


def differences(here: dict[str, str], there: dict[str, str]) -> list[str]:
    """What differs, as "cores: 2 here, 4 there"; empty when the machines are alike."""
    return [f"{name}: {here.get(name, '?')} here, {there.get(name, '?')} there"
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
