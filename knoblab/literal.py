"""Text that did not come from knoblab's own code, shown as it is in every medium.

Names and descriptions of runs, studies and steps, SQL, file paths, values of settings and the
server's own messages may hold anything: control characters (an ANSI escape sequence would
recolour or rewrite the user's terminal, a carriage return hide what came before), line breaks
where one line is expected, console markup, Markdown or HTML. Every output goes through
`literal`, then through the escaping of its medium: the terminal's consoles have markup off
(knoblab.cli), report.md escapes Markdown (`markdown`, `code_block`), report.html escapes HTML
(jinja's autoescape), the charts escape mathtext and replace what no font can draw
(knoblab.report.charts).
"""

from __future__ import annotations

import re

# C0 and C1 control characters but tab and line breaks, DEL, the bidirectional overrides
# and isolates (they reorder what is shown: "Trojan Source"), and lone surrogates (from
# undecodable file names: they cannot even be encoded for the terminal).
_CONTROL = re.compile("[\x00-\x08\x0e-\x1b\x1f\x7f-\x84\x86-\x9f\u202a-\u202e\u2066-\u2069"
                      "\ud800-\udfff]")
_BREAK = re.compile("\r\n|[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def literal(text: object, *, lines: bool = False) -> str:
    """`text` safe to show: control characters as visible escapes (ESC as "\\x1b"), and line
    breaks as spaces where one line is expected (`lines=False`), else as "\\n"."""
    shown = _CONTROL.sub(_escape, str(text))
    return _BREAK.sub("\n" if lines else " ", shown)


# ----------------------------------------------------------------------------- Markdown

# What starts Markdown structure anywhere in a line (CommonMark and GitHub's extensions):
# escapes, code spans, emphasis, raw HTML and autolinks, tables, strikethrough, math.
_MD_ALWAYS = re.compile(r"([\\`*<|~$#])")
# "_" emphasises only at a word's edge; "]" makes a link only before "(", "[" or ":"; "&"
# makes an entity only as "&name;" or "&#123;".
_MD_EDGE_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_MD_LINK = re.compile(r"\](?=[(\[:])")
_MD_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")
# What starts a block at the beginning of a line: a list, a quote, a heading underline.
_MD_BLOCK_START = re.compile(r"^([-+=>]|\d+(?=[.)]))")


def markdown(text: object) -> str:
    """`text` as one line of Markdown that renders exactly as `text` reads."""
    shown = literal(text).strip()
    shown = _MD_ALWAYS.sub(r"\\\1", shown)
    shown = _MD_EDGE_UNDERSCORE.sub(r"\\_", shown)
    shown = _MD_LINK.sub(r"\\]", shown)
    shown = _MD_ENTITY.sub(r"\\&", shown)
    match = _MD_BLOCK_START.match(shown)
    if match:  # "1." and "1)" start a list: the escape goes before the "." or ")"
        end = match.end()
        shown = (shown[:end] + "\\" + shown[end:]) if match.group().isdigit() \
            else "\\" + shown
    return shown


def code_block(text: object, language: str = "") -> str:
    """`text` as a fenced code block: the fence is longer than any run of backticks in it, so
    nothing inside can end the block."""
    shown = literal(text, lines=True).rstrip("\n")
    longest = max((len(run) for run in re.findall(r"`+", shown)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{shown}\n{fence}"
