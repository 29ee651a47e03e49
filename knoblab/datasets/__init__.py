"""The kinds of data [dataset] names, by name: the only place that lists them.

A point runs on a `Dataset` (knoblab.datasets.base): its key names a template datadir, built
once. [dataset] names one of KINDS (a dump when `dump` is given, the scan table otherwise); a
workload kind may make data of its own instead (sysbench's tables, a script's setup over the
data, an empty server). Adding a kind: a module whose class follows `DatasetKind`, and its
line in KINDS.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from knoblab.datasets import dump, scan
from knoblab.datasets.base import Dataset, DatasetKind
from knoblab.datasets.dump import Dump
from knoblab.datasets.scan import ScanTable
from knoblab.errors import UserError

KINDS: dict[str, type[DatasetKind]] = {
    Dump.kind: Dump,
    ScanTable.kind: ScanTable,
}
DEFAULT = ScanTable.kind  # what [dataset] is when it names no other kind
KEYS = scan.KEYS | dump.KEYS  # every key [dataset] may hold, whichever kind it names

__all__ = ["DEFAULT", "KEYS", "KINDS", "Dataset", "DatasetKind", "kind_of", "read"]


def kind_of(section: Mapping[str, Any]) -> str:
    """The kind [dataset] names: the first whose key it holds (`dump`), else the default."""
    return next((name for name, kind in KINDS.items()
                 if kind.named_by is not None and kind.named_by in section), DEFAULT)


def read(section: dict[str, Any], base_dir: Path | None,
         sweep: Mapping[str, Sequence[Any]] | None = None,
         refused: Mapping[str, str] | None = None) -> Dataset:
    """[dataset] read and checked by the kind it names; a kind in `refused` (the workload's
    word on why it does not run on that data) is refused before its keys are read."""
    name = kind_of(section)
    if refused and name in refused:
        raise UserError(refused[name])
    return KINDS[name].from_spec(section, base_dir, sweep)
