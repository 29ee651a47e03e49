"""The one codec of knoblab's public documents and stored descriptions: a record (a frozen
dataclass) whose JSON is its fields, in order, under their own names, and which reads back from
it. A key that JSON written by an older version lacks reads as the field's default (or as
empty); a key this version does not know is left aside (but for a point's figures, where a
workload kind keeps its own: knoblab.records). What users' scripts read (result.json,
tune.json, a run's description in the store) keeps its keys by giving each shape such a record.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, Field, fields, is_dataclass
from enum import Enum
from typing import Any, ClassVar, TypeVar

JSON = dict[str, Any]


def encode(value: Any) -> Any:
    """`value` as JSON holds it: records by their fields, lists and dicts item by item."""
    if isinstance(value, Record):
        return value.to_json()
    if is_dataclass(value) and not isinstance(value, type):
        return {json_key(f): encode(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    return value


def json_key(f: Field[Any]) -> str:
    """A field's key in JSON: its name, unless the JSON has always called it otherwise."""
    return str(f.metadata.get(KEY, f.name))


# A field's metadata: its key in JSON when it is not the field's name; the key left out when
# the field is None (a key some documents have always lacked rather than held null).
KEY = "json"
OMITTED_WHEN_NONE = {"omitted": True}


class Record:
    """A record whose JSON is its fields, in order, under their own names (or the key a field's
    metadata gives), and which reads back from it (`decode`)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]  # set by @dataclass on each record

    def to_json(self) -> JSON:
        return {json_key(f): encode(value) for f in fields(self)
                if (value := getattr(self, f.name)) is not None
                or not f.metadata.get("omitted")}

    @classmethod
    def from_json(cls: type[R], data: Mapping[str, Any]) -> R:
        return typing.cast(R, decode(cls, data))


R = TypeVar("R", bound=Record)


def decode(hint: Any, value: Any) -> Any:
    """`value`, as JSON holds it, as the type `hint` names: the one way every record is read
    back (a run's results, a study's result). Records are rebuilt from their fields, tuples
    from lists, a vocabulary's members from their words; a key that JSON written by an older
    version lacks reads as the field's default, or as empty (None, 0, "", [], {}) when it has
    none; so does a null where the field takes none."""
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        chosen = [a for a in args if a is not type(None)]
        return decode(chosen[0], value) if len(chosen) == 1 else value
    if isinstance(hint, type) and issubclass(hint, Enum):
        return hint(value)
    if isinstance(hint, type) and is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        return hint(**{f.name: _field(f, hints[f.name], value) for f in fields(hint) if f.init})
    if origin is list:
        return [decode(args[0], v) for v in value]
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(decode(args[0], v) for v in value)
        return tuple(decode(a, v) for a, v in zip(args, value, strict=False)) if args else \
            tuple(value)
    if origin is dict and args:
        return {k: decode(args[1], v) for k, v in value.items()}
    return value


def _field(f: Field[Any], hint: Any, data: Mapping[str, Any]) -> Any:
    found = data.get(json_key(f))
    if found is None and not _takes_none(hint):
        return _missing(f, hint)
    return decode(hint, found)


def _takes_none(hint: Any) -> bool:
    return hint is Any or typing.get_origin(hint) in (typing.Union, types.UnionType) and \
        type(None) in typing.get_args(hint)


def _missing(f: Field[Any], hint: Any) -> Any:
    if "missing" in f.metadata:
        return f.metadata["missing"]
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    origin = typing.get_origin(hint) or hint
    # a vocabulary has no empty word: None (a part read only to be replaced, as a study's)
    if origin in (typing.Union, types.UnionType) or \
            isinstance(origin, type) and issubclass(origin, Enum):
        return None
    # a word of a Literal, a record: nothing stands for it
    return {list: [], dict: {}, tuple: (), str: "", int: 0, float: 0.0, bool: False}.get(origin)
