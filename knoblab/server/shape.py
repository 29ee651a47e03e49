"""The machine a sandbox gets: `[machine]` in a spec — its memory (page cache included), its
CPUs, its disk's speed and the file system its data lives on — so that a test box answers for
the production machine it stands for.

    [machine]
    memory = "2G"          # the sandbox's memory, page cache included
    cpus = 1               # CPUs it may use (the first ones); or cpu = 0.5, a share of time
    disk_read = "100MB/s"  # and disk_write; iops = 500 (reads and writes each)
    datadir = "/mnt/xfs"   # where its data directories live: the file system under test

The limits are the kernel's control groups (`knoblab.server.cgroups`): one group per
sandbox, made before the server starts, the server put in it as it starts, removed when it
stops. The client (sysbench, the query and script clients) stays outside, as on a real
deployment where it runs elsewhere.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knoblab.errors import UserError
from knoblab.keys import Key, Keys
from knoblab.section import check_keys
from knoblab.server.cgroups import Hierarchy, Limits, device_of
from knoblab.units import format_size, parse_size

# The least a sandbox can be given and still start and run, measured on a 10.11 sandbox: its
# resident set after start-up is about 80 MB, with the default buffer pool or a 16M one, and
# what it then fills (buffers, the page cache it reads through) needs room beside it.
LEAST_MEMORY = 160 << 20
# A start reads about 40 MB (1 MB/s: 40 s) and makes about 300 I/Os (10 per second: 30 s);
# below these a start takes minutes and runs into the start's timeout.
LEAST_RATE = 1_000_000
LEAST_IOPS = 10
KEYS = Keys(
    Key("memory", "Memory every sandbox may use (a control group's limit: the server and the "
        "page cache it reads through); at most this machine's.", 'a size ("2G")',
        low=LEAST_MEMORY, bounds=f"at least {format_size(LEAST_MEMORY)}"),
    Key("cpus", "How many CPUs every sandbox runs on (the first ones); at most this "
        "machine's. Not with cpu.", "a whole number", low=1),
    Key("cpu", "A share of CPU time, in CPUs (0.5: half of one); at most this machine's CPUs. "
        "Not with cpus.", "a number", low=0.01),
    Key("disk_read", "Bytes a second every sandbox may read from the disk holding its data.",
        'a rate ("100MB/s")', low=LEAST_RATE, bounds="at least 1MB/s"),
    Key("disk_write", "Bytes a second every sandbox may write to the disk holding its data.",
        'a rate ("100MB/s")', low=LEAST_RATE, bounds="at least 1MB/s"),
    Key("iops", "Reads and writes a second (each) every sandbox may make.", "a whole number",
        low=LEAST_IOPS),
    Key("datadir", "A folder on the file system under test, where every sandbox keeps its "
        "data; sweep machine.datadir to compare file systems.", "a folder"),
)
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?)B/s\s*\Z", re.IGNORECASE)
_RATE_EXAMPLE = "e.g. \"100MB/s\" or \"1.5GB/s\" (bytes per second; K, M, G are powers of 1000)"


@dataclass(frozen=True)
class Shape:
    """What [machine] asks of every sandbox; None: as this machine is."""

    memory: int | None = None  # bytes
    cpus: int | None = None  # how many CPUs (the first ones)
    cpu: float | None = None  # a share of CPU time, in CPUs
    disk_read: int | None = None  # bytes per second
    disk_write: int | None = None
    iops: int | None = None  # per second, reads and writes each
    datadir: Path | None = None

    @property
    def limited(self) -> bool:
        """Whether anything asks for a control group (a datadir alone does not)."""
        return any(v is not None for v in (self.memory, self.cpus, self.cpu, self.disk_read,
                                           self.disk_write, self.iops))

    @classmethod
    def from_spec(cls, section: Mapping[str, Any], base_dir: Path | None) -> Shape:
        """[machine], checked; one clear line for anything wrong."""
        check_keys("[machine]", dict(section), KEYS)
        memory = None
        if "memory" in section:
            memory = parse_size(section["memory"], "[machine] memory")
            if memory < LEAST_MEMORY:
                raise UserError(f"[machine] memory = {section['memory']!r}: below "
                                f"{format_size(LEAST_MEMORY)}, the least a MariaDB server "
                                "starts and runs in (about 80M once started, and room for "
                                "what it reads); give at least "
                                f"{format_size(LEAST_MEMORY)}")
            import psutil  # here: a listing that imports this package needs none of it

            total = psutil.virtual_memory().total
            if memory > total:
                raise UserError(f"[machine] memory = {section['memory']!r}: this machine has "
                                f"{format_size(total)}; a sandbox cannot have more memory than "
                                "the machine it runs on (a limit above it limits nothing)")
        cpus = _count(section, "cpus")
        if cpus is not None and cpus > (os.cpu_count() or 1):
            raise UserError(f"[machine] cpus = {cpus}: this machine has {os.cpu_count()}; a "
                            "sandbox cannot have more CPUs than the machine it runs on")
        cpu = None
        if "cpu" in section:
            raw = section["cpu"]
            share = _number(raw, float)
            # 0.01 is the kernel's least quota (1 ms per 100 ms), and a server still starts
            # on it (in about 9 s).
            if share is None or not 0.01 <= share <= (os.cpu_count() or 1):
                raise UserError(f"[machine] cpu = {raw!r}: a share of CPU time from 0.01 to "
                                f"{os.cpu_count()} (this machine's CPUs), e.g. cpu = 0.5")
            cpu = share
        if cpus is not None and cpu is not None:
            raise UserError("[machine] give cpus (how many CPUs) or cpu (a share of CPU time), "
                            "not both")
        datadir = None
        if "datadir" in section:
            raw = section["datadir"]
            if not isinstance(raw, str) or not raw.strip():
                raise UserError("[machine] datadir: give a folder on the file system under "
                                "test, e.g. datadir = \"/mnt/xfs/knoblab\"")
            datadir = ((base_dir or Path.cwd()) / Path(raw).expanduser()).absolute()
        iops = _count(section, "iops")
        if iops is not None and iops < LEAST_IOPS:
            raise UserError(f"[machine] iops = {iops}: a server's start makes about 300 I/Os, "
                            f"so below {LEAST_IOPS} per second it takes minutes and does not "
                            f"start in time; give at least iops = {LEAST_IOPS}")
        return cls(memory=memory, cpus=cpus, cpu=cpu,
                   disk_read=_rate(section, "disk_read"), disk_write=_rate(section, "disk_write"),
                   iops=iops, datadir=datadir)

    def describe(self) -> str:
        """In words, for reports: "a 2G, 1-CPU box reading 100 MB/s"; "" when unshaped."""
        parts = []
        if self.memory is not None:
            parts.append(f"{format_size(self.memory)} of memory")
        if self.cpus is not None:
            parts.append(f"{self.cpus} CPU{'s' if self.cpus > 1 else ''}")
        if self.cpu is not None:
            parts.append(f"{self.cpu:g} of a CPU's time")
        if self.disk_read is not None:
            parts.append(f"reads at {_rate_text(self.disk_read)}")
        if self.disk_write is not None:
            parts.append(f"writes at {_rate_text(self.disk_write)}")
        if self.iops is not None:
            parts.append(f"{self.iops} I/O per second")
        if self.datadir is not None:
            parts.append(f"data in {self.datadir}")
        return ", ".join(parts)

    def limits(self, hierarchy: Hierarchy, home: Path) -> Limits:
        """The control-group limits: the first `cpus` of the CPUs this process may use, the
        disk limits on the device holding the data (the datadir's, else the home's)."""
        cpus = None
        if self.cpus is not None:
            cpus = tuple(sorted(hierarchy.available_cpus())[:self.cpus])
        io = any(v is not None for v in (self.disk_read, self.disk_write, self.iops))
        return Limits(memory=self.memory, cpus=cpus, cpu_quota=self.cpu,
                      read_bps=self.disk_read, write_bps=self.disk_write,
                      read_iops=self.iops, write_iops=self.iops,
                      device=device_of(self.datadir or home) if io else None)

    def to_json(self) -> dict[str, object]:
        """As kept with the run (its machine fingerprint) and in the results."""
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in
                (("memory", self.memory), ("cpus", self.cpus), ("cpu", self.cpu),
                 ("disk_read", self.disk_read), ("disk_write", self.disk_write),
                 ("iops", self.iops), ("datadir", self.datadir)) if v is not None}


def _number(raw: Any, kind: type[int] | type[float]) -> int | float | None:
    """A number of the spec, or None. A swept value ([sweep] "machine.cpus" = [1, 2]) comes as
    the point's text ("1"), and is read back as the number it was."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, str):
        try:
            return kind(raw.strip())
        except ValueError:
            return None
    if kind is float and isinstance(raw, int | float):
        return float(raw)
    return raw if isinstance(raw, int) else None


def _count(section: Mapping[str, Any], key: str) -> int | None:
    if key not in section:
        return None
    raw = section[key]
    count = _number(raw, int)
    if count is None or count < 1:
        raise UserError(f"[machine] {key} = {raw!r}: must be a whole number of at least 1")
    return int(count)


def _rate(section: Mapping[str, Any], key: str) -> int | None:
    if key not in section:
        return None
    raw = section[key]
    found = _RATE.match(raw) if isinstance(raw, str) else None
    if found is None:
        raise UserError(f"[machine] {key} = {raw!r}: give a rate, {_RATE_EXAMPLE}")
    number, unit, binary = found.groups()
    base = 1024 if binary else 1000
    value = int(float(number) * base ** " KMGT".index(unit.upper() or " "))
    if value < LEAST_RATE:
        raise UserError(f"[machine] {key} = {raw!r}: below {_rate_text(LEAST_RATE)} a server "
                        "takes minutes to start and stop (a start alone reads about 40 MB); "
                        f"give at least \"{_rate_text(LEAST_RATE).replace(' ', '')}\"")
    return value


def _rate_text(value: int) -> str:
    for unit, size in (("GB/s", 10**9), ("MB/s", 10**6)):
        if value >= size:
            return f"{value / size:g} {unit}"
    return f"{value / 1000:g} KB/s"
