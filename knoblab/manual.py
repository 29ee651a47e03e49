"""The manual's reference pages, generated from the program itself: every spec key from its
declaration (knoblab.keys), every command and flag from the argument parser, every key of the
JSON documents from their records (knoblab.codec). The manual's build (docs/hooks.py) adds
these pages; anything undocumented (a key or a flag without what it means) stops it."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import io
import textwrap
import tokenize
import types
import typing
from collections.abc import Iterator
from enum import Enum
from typing import Any

from knoblab.keys import Keys

PAGES = ("reference/spec.md", "reference/commands.md", "reference/json.md")


class Undocumented(Exception):
    """Something the program takes or writes has no words in the reference."""


def pages() -> dict[str, str]:
    """Each reference page's Markdown, by its path in docs/."""
    return {"reference/spec.md": spec_page(), "reference/commands.md": commands_page(),
            "reference/json.md": json_page()}


# ------------------------------------------------------------------------------- the spec


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(keys: Keys) -> list[str]:
    lines = ["| key | takes | default | allowed | what it means |", "|---|---|---|---|---|"]
    for key in keys.each():
        lines.append(f"| `{key.name}` | {_cell(key.takes)} | "
                     f"{_cell(key.default) if key.default is not None else '—'} | "
                     f"{_cell(key.allowed()) or '—'} | {_cell(key.means)} |")
    return lines


def spec_page() -> str:
    from knoblab import server, workloads
    from knoblab.search.options import KEYS as TUNE_KEYS
    from knoblab.server.shape import KEYS as MACHINE_KEYS
    from knoblab.spec import SECTION_KEYS, TOP_KEYS
    from knoblab.workloads.base import Rounds

    server_common = Keys(*(k for k in SECTION_KEYS["server"].each()
                           if not any(k.name in kind.keys for kind in server.KINDS.values())))
    out = ["# The spec, key by key", "",
           "Generated from the declarations the spec's readers check keys against "
           "(`knoblab/keys.py`): a key written that is not listed here is refused, with the "
           "closest one it may have meant. A value outside *allowed* is refused in one line "
           "naming the key, before anything runs. Sizes are written as MariaDB writes them "
           "(`\"64K\"`, `\"16M\"`, `\"4G\"`), durations as `\"30s\"`, `\"15m\"`, `\"2h\"`.",
           "", "## The top of a spec", "", *_table(TOP_KEYS), "",
           "## [server]", "", "Every kind of server:", "", *_table(server_common)]
    for name, kind in server.KINDS.items():
        out += ["", f"### [server] kind = \"{name}\"", "",
                f"{kind.described[0].upper()}{kind.described[1:]}; its own keys:", "",
                *_table(kind.keys)]
    out += ["", "## [dataset]", "", *_table(SECTION_KEYS["dataset"]), "", "## [workload]", "",
            "Each kind reads its own keys; every kind also takes the rounds' keys, listed "
            "last.", ""]
    for name, work in workloads.KINDS.items():
        own = Keys(*(k for k in work.keys.each() if k.name not in Rounds.KEYS))
        out += [f"### [workload] kind = \"{name}\"", "", *_table(own), ""]
    out += ["### Rounds (every kind)", "", *_table(Rounds.KEYS), ""]
    for title, keys in (("[statistics]", SECTION_KEYS["statistics"]),
                        ("[steps]", SECTION_KEYS["steps"]), ("[machine]", MACHINE_KEYS),
                        ("[tune]", TUNE_KEYS)):
        out += [f"## {title}", "", *_table(keys), ""]
    return "\n".join(out)


# ---------------------------------------------------------------------------- the commands


Command = tuple[str, str, argparse.ArgumentParser]  # its name, its one-line help, its parser


def _commands(parser: argparse.ArgumentParser) -> Iterator[Command]:
    """Each command: its name, its one-line help, its parser."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


def _flag_rows(parser: argparse.ArgumentParser, command: str) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if action.help is None or action.help == argparse.SUPPRESS:
            if action.help == argparse.SUPPRESS:
                continue
            named = "/".join(action.option_strings) or action.dest
            raise Undocumented(f"knoblab {command}: {named} has no help")
        names = ", ".join(f"`{o}`" for o in action.option_strings) or \
            f"`{action.metavar or action.dest.upper()}`"
        if action.option_strings and action.nargs != 0:
            names += f" {action.metavar or action.dest.upper()}"
        default = action.default
        shown = "—" if default in (None, False, argparse.SUPPRESS) or callable(default) \
            else f"`{default}`"
        rows.append(f"| {names} | {_cell(action.help % vars(action))} | {shown} |")
    return rows


def commands_page() -> str:
    from knoblab.cli import build_parser

    parser = build_parser()
    out = ["# Commands", "", "Generated from knoblab's argument parser: each command, and every "
           "flag it takes (`knoblab COMMAND --help` says the same).", "",
           "| before the command | what it means | default |", "|---|---|---|",
           *_flag_rows(parser, ""), ""]
    for name, summary, sub in _commands(parser):
        if not summary:
            raise Undocumented(f"knoblab {name}: the command has no help")
        out += [f"## knoblab {name}", "", f"{summary[0].upper()}{summary[1:]}.", "",
                "```", sub.format_usage().strip().removeprefix("usage: "), "```", ""]
        rows = _flag_rows(sub, name)
        if rows:
            out += ["| argument | what it means | default |", "|---|---|---|", *rows, ""]
    return "\n".join(out)


# ------------------------------------------------------------------------ the JSON documents


def _field_comments(cls: type) -> dict[str, str]:
    """The comment beside each field of a record's class, read from its source."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
              if t.type == tokenize.COMMENT]
    comments = {t.start[0]: t.string.lstrip("# ").strip() for t in tokens}
    alone = {t.start[0] for t in tokens if t.line.lstrip().startswith("#")}  # lines of their own
    found = {}
    for node in ast.parse(source).body[0].body:  # type: ignore[attr-defined]
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        if node.end_lineno in comments:  # beside it
            found[node.target.id] = comments[node.end_lineno]
        elif node.lineno - 1 in alone:  # or on the lines just above it
            first = node.lineno - 1
            while first - 1 in alone:
                first -= 1
            found[node.target.id] = " ".join(comments[n] for n in range(first, node.lineno))
    return found


def _type_name(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return " or ".join(f'"{a}"' for a in args)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return " or ".join(f'"{m.value}"' for m in hint)
    if origin in (typing.Union, types.UnionType):
        parts = [_type_name(a) for a in args if a is not type(None)]
        return " or ".join(parts) + (" or null" if type(None) in args else "")
    if origin in (list, tuple):
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        return "object"
    if isinstance(hint, type):
        if dataclasses.is_dataclass(hint):
            return f"[{hint.__name__}](#{hint.__name__.lower()})"
        return {str: "text", int: "whole number", float: "number", bool: "true or false"}.get(
            hint, "text" if issubclass(hint, str) else hint.__name__)
    return "any" if hint is Any else str(hint).replace("typing.", "")


def _records(root: type) -> list[type]:
    """`root` and every record its fields hold, in the order first met."""
    seen: list[type] = []

    def visit(hint: Any) -> None:
        for arg in typing.get_args(hint):
            visit(arg)
        if isinstance(hint, type) and dataclasses.is_dataclass(hint) and hint not in seen:
            seen.append(hint)
            for hint_of in typing.get_type_hints(hint).values():
                visit(hint_of)

    visit(root)
    return seen


def _record_section(cls: type) -> list[str]:
    """A record's table; each of its keys must say what it holds, in a comment beside its
    field or on the lines just above it."""
    from knoblab.codec import json_key

    doc = " ".join((inspect.getdoc(cls) or "").split())
    hints = typing.get_type_hints(cls)
    comments = _field_comments(cls)
    out = [f"### {cls.__name__}", "", doc, "", "| key | holds | what it means |",
           "|---|---|---|"]
    for f in dataclasses.fields(cls):
        if not comments.get(f.name):
            raise Undocumented(f"{cls.__name__}.{f.name} (key {json_key(f)!r}) says nothing "
                               "of what it holds: a comment beside the field")
        absent = " (absent when it has none)" if f.metadata.get("omitted") else ""
        out.append(f"| `{json_key(f)}` | {_cell(_type_name(hints[f.name]))}{absent} | "
                   f"{_cell(comments.get(f.name, ''))} |")
    return [*out, ""]


def json_page() -> str:
    from knoblab.capturing import CaptureJSON
    from knoblab.records import ResultsJSON
    from knoblab.report.shapes import ComparisonJSON, TuneJSON

    out = ["# The JSON documents", "",
           "Generated from the records that write them: each key, in the order written, and "
           "what it holds. A key an older knoblab did not write reads back as empty.", ""]
    for title, root in (("result.json: a run (`knoblab run --json`, `knoblab report`)",
                         ResultsJSON),
                        ("tune.json: a study (`knoblab tune`)", TuneJSON),
                        ("capture.json: a capture (`knoblab capture`)", CaptureJSON),
                        ("`knoblab compare --json`", ComparisonJSON)):
        out += [f"## {title}", ""]
        for cls in _records(root):
            out += _record_section(cls)
    return "\n".join(out)


# ---------------------------------------------------------------------- the manual's build


def on_files(files: Any, config: Any) -> Any:
    """MkDocs' hook (mkdocs.yml): the reference pages added to the manual as it is built."""
    from mkdocs.structure.files import File

    for path, text in pages().items():
        files.append(File.generated(config, path, content=text))
    return files


if __name__ == "__main__":  # python -m knoblab.manual reference/spec.md: a page, printed
    import sys

    found = pages()
    if len(sys.argv) != 2 or sys.argv[1] not in found:
        print(f"python -m knoblab.manual PAGE: give one of {', '.join(found)}",
              file=sys.stderr)
        sys.exit(2)
    print(found[sys.argv[1]])
