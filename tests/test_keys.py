"""Each spec key's declaration (knoblab.keys: what the manual's reference says of it) held to
what its section's reader does: a number past either end of its declared range is refused
naming the key, a value outside its declared choices is refused, each choice is taken, and its
declared default, written out, reads as leaving the key out. A declaration that drifts from
its reader fails here."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from typing import Any

import pytest

from knoblab import datasets
from knoblab.errors import UserError
from knoblab.keys import Key, Keys
from knoblab.search.options import KEYS as TUNE_KEYS
from knoblab.search.options import TuneOptions
from knoblab.server import ExternalKind
from knoblab.server.shape import KEYS as MACHINE_KEYS
from knoblab.server.shape import Shape
from knoblab.spec import STATISTICS_KEYS, STEPS_KEYS, TOP_KEYS, parse_spec
from knoblab.workloads import KINDS

SWEEP = {"sort_buffer_size": ["1M", "2M"]}
# A whole spec around each kind's [workload] section: what the kind needs beside the key tried.
WORKLOADS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "query": ({"kind": "query", "sql": "SELECT 1"}, {"rows": 10}),
    "sysbench": ({"kind": "sysbench"}, {}),
    "script": ({"kind": "script", "body": "SELECT 1"}, {}),
}
# Keys whose reader needs another key beside them to take their range's far end.
NEEDS = {("sysbench", "warmup"): {"duration": 10**7},
         ("query", "min_repetitions"): {"max_repetitions": 10_000}}

Read = Callable[[dict[str, Any]], Any]  # a section's keys in, what its reader makes of them


def _workload(kind: str) -> Read:
    workload, dataset = WORKLOADS[kind]

    def read(keys: dict[str, Any]) -> Any:
        spec = parse_spec({"workload": {**workload, **keys},
                           **({"dataset": dataset} if dataset else {}), "sweep": SWEEP})
        return spec.workload

    return read


def _spec_section(name: str) -> Read:
    measured = {"sweep": SWEEP} if name == "statistics" else \
        {"step": [{"sort_buffer_size": "1M"}]}  # [steps] says how [[step]] tables are run

    def read(keys: dict[str, Any]) -> Any:
        spec = parse_spec({"workload": {"kind": "query", "sql": "SELECT 1"},
                           "dataset": {"rows": 10}, **measured, name: keys})
        return spec.statistics if name == "statistics" else spec.one_at_a_time

    return read


def _tune(keys: dict[str, Any]) -> Any:
    return TuneOptions.from_spec(keys, "study")


def _machine(keys: dict[str, Any]) -> Any:
    return Shape.from_spec(keys, None)


def _external(keys: dict[str, Any]) -> Any:
    server = ExternalKind.from_section(keys)
    return server.endpoint, server.database


SECTIONS: list[tuple[str, Keys, Read]] = [
    *((f"[workload] kind = {kind!r}", KINDS[kind].keys, _workload(kind)) for kind in WORKLOADS),
    ("[statistics]", STATISTICS_KEYS, _spec_section("statistics")),
    ("[steps]", STEPS_KEYS, _spec_section("steps")),
    ("[tune]", TUNE_KEYS, _tune),
    ("[machine]", MACHINE_KEYS, _machine),
    ("[server] kind = 'external'", ExternalKind.keys, _external),
]
CASES = [(where, key, read) for where, keys, read in SECTIONS for key in keys.each()]
IDS = [f"{where} {key.name}" for where, key, _ in CASES]


def _extra(where: str, key: Key) -> dict[str, Any]:
    kind = where.split("'")[1] if "'" in where else ""
    return NEEDS.get((kind, key.name), {})


@pytest.mark.parametrize(("where", "key", "read"), CASES, ids=IDS)
def test_a_number_past_its_declared_range_is_refused_naming_it(where: str, key: Key,
                                                                read: Read):
    if key.low is None and key.high is None:
        return
    past = [v for v in ((key.low - 1 if key.low is not None and key.low >= 1 else None),
                        (-1 if key.low == 0 else None),
                        (key.high + 1 if key.high is not None else None)) if v is not None]
    whole = "whole number" in key.takes or "rate" in key.takes
    for value in past:
        written = int(value) if whole else value
        with pytest.raises(UserError, match=key.name):
            read({**_extra(where, key), key.name: written})


@pytest.mark.parametrize(("where", "key", "read"), CASES, ids=IDS)
def test_a_value_outside_its_declared_choices_is_refused_and_each_choice_taken(
        where: str, key: Key, read: Read):
    if not key.choices or key.name == "kind":  # a kind's own name is what chose this reader
        return
    with pytest.raises(UserError, match=key.name):
        read({key.name: "no-such-choice"})
    for choice in key.choices:
        read({key.name: choice})


@pytest.mark.parametrize(("where", "key", "read"), CASES, ids=IDS)
def test_its_declared_default_written_out_reads_as_leaving_it_out(where: str, key: Key,
                                                                  read: Read):
    if key.default is None:
        return
    try:
        value = tomllib.loads(f"value = {key.default}")["value"]
    except tomllib.TOMLDecodeError:
        assert key.default and " " in key.default, \
            f"{where} {key.name}: its default {key.default!r} is neither TOML nor words"
        return  # said in words ("the spec file's name"): derived, not a value to write
    assert read({key.name: value}) == read({})


def test_every_section_of_a_spec_has_its_keys_declared():
    """Each section the top of a spec names is read against declared keys: the reference
    lists them all."""
    from knoblab.spec import SECTION_KEYS

    assert set(SECTION_KEYS) | {"workload", "tune", "machine", "sweep", "step", "tie"} \
        >= set(TOP_KEYS) - {"name", "description"}
    assert SECTION_KEYS["dataset"] is datasets.KEYS
    for keys in (*SECTION_KEYS.values(), TUNE_KEYS, MACHINE_KEYS,
                 *(kind.keys for kind in KINDS.values())):
        assert all(k.means.strip() and k.means.rstrip().endswith((".", ")")) for k in
                   keys.each()), [k.name for k in keys.each()]


def test_a_key_declared_without_its_meaning_is_refused():
    with pytest.raises(ValueError, match="nothing"):
        Keys(Key("nothing", " "))
