"""The kinds of workload, by name: the only place that lists them.

Adding a kind: a module whose class subclasses `knoblab.workloads.base.Workload` (its abstract
members, and the capabilities the kind has), and its line in KINDS. Everything else (spec,
runner, results, report) goes through the protocol; the data a point runs on is a
`knoblab.datasets.Dataset`.
"""

from __future__ import annotations

from typing import Any

from knoblab.errors import UserError
from knoblab.records import Objective
from knoblab.section import check_keys
from knoblab.workloads.base import Workload, WorkloadError
from knoblab.workloads.query import QueryWorkload
from knoblab.workloads.replay import ReplayWorkload
from knoblab.workloads.script import ScriptWorkload
from knoblab.workloads.sysbench import SysbenchWorkload

KINDS: dict[str, type[Workload]] = {
    QueryWorkload.kind: QueryWorkload,
    SysbenchWorkload.kind: SysbenchWorkload,
    ScriptWorkload.kind: ScriptWorkload,
    ReplayWorkload.kind: ReplayWorkload,
}

__all__ = ["KINDS", "Objective", "Workload", "WorkloadError", "kind", "of_section"]


def kind(name: str) -> type[Workload]:
    """The kind a stored run was measured with (runs before kinds were named: query)."""
    return KINDS[name]


def of_section(section: dict[str, Any]) -> type[Workload]:
    """The kind a [workload] section names, its keys checked against that kind's."""
    name = section.get("kind", "query")
    if not isinstance(name, str) or name not in KINDS:
        quoted = [f'"{k}"' for k in KINDS]
        raise UserError(f"[workload] kind = {name!r}: use {', '.join(quoted[:-1])} or "
                        f"{quoted[-1]}")
    found = KINDS[name]
    check_keys("[workload]", section, found.keys)
    return found
