"""A statement's class: its text with the user's values taken out (a fingerprint), and a short
stable id for it.

pt-query-digest's fingerprints are the reference; the statement is read with sqlglot's MySQL
tokenizer (compiled by sqlglotc: ~5 µs for a sysbench-sized statement, about 6 times faster
than its pure-Python path and 20 times faster than sqlparse's lexer; benchmarks/
capture_tokenizers.py), so that a quote inside a comment or a `--` inside a string never
fools it, as it can a chain of regular expressions. The rules:

- literals (strings, numbers with their sign, hex and bit values, TRUE, FALSE, NULL but not
  in `IS [NOT] NULL`) become `?`; a character set introducer goes with its string;
- comments are dropped; an executable comment (`/*!50001 ...*/`, MariaDB's `/*M!...*/`) is
  read as the code the server runs; an optimizer hint (`/*+ ... */`) is kept, lowercased and
  with its numbers and strings as `?`: a hint changes the plan, so `/*+ NO_INDEX(t a) */` is
  another class (pt-query-digest drops hints);
- keywords and names are lowercased, `backticks` dropped around plain names, and the spacing
  is knoblab's own (one space between words and around operators, none inside parentheses
  or before a comma), so `a=1` and `a = 1` are one class (pt-query-digest keeps the spacing
  as written, collapsed);
- `IN (?, ?, ?)` becomes `in(?+)`; a `VALUES` list of literal rows becomes `values(?+)`, and
  one of equal rows keeps the first;
- `LIMIT 10, 20` is `limit ?, ?` and `LIMIT 10` is `limit ?` (pt-query-digest makes both
  `limit ?`: a page and a row count are different statements to the server);
- a UNION of equal parts is its first part and `/*repeat union*/` (or `union all`);
- `ASC` is dropped (the default), `USE db` is `use ?`, a final `;` is dropped;
- `CALL p(1, 'x')` is `call p(?, ?)` (pt-query-digest: `call p`; a procedure's arguments are
  fixed in number, so the classes are the same).

A statement the tokenizer cannot read (an unterminated string: a log cut inside it) is its
first word and `/* unreadable */`. A name with bytes that are not UTF-8 (read from the log as
lone surrogates) has them as escapes (`t\\udcff`): a fingerprint is text any store, file or
terminal takes. An 11 MB multi-row INSERT takes seconds (docs/benchmarks.md).
"""

from __future__ import annotations

import hashlib
import math
import re
import struct
from dataclasses import dataclass
from typing import ClassVar

from sqlglot.dialects.mysql import MySQL
from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

_T = TokenType
_LITERALS = frozenset({_T.STRING, _T.NUMBER, _T.HEX_STRING, _T.BIT_STRING,
                       _T.NATIONAL_STRING, _T.BYTE_STRING, _T.RAW_STRING, _T.TRUE, _T.FALSE})
_NAMES = frozenset({_T.VAR, _T.IDENTIFIER})
_VALUES = _LITERALS | {_T.PLACEHOLDER, _T.INTRODUCER}
_SIGNS = frozenset({_T.DASH, _T.PLUS})
# After one of these a sign is an operator; after anything else (`(`, `=`, `,`, a keyword,
# nothing) it belongs to the number that follows.
_NOT_OPERANDS = _LITERALS | _NAMES | {_T.R_PAREN, _T.NULL, _T.PLACEHOLDER}
_EXECUTABLE = re.compile(r"/\*M?!\d*(.*?)\*/", re.DOTALL)
_HINT_VALUES = re.compile(r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.)*\"|\b\d+(?:\.\d+)?\b")
_PLAIN_NAME = re.compile(r"[a-z_$][a-z0-9_$]*\Z")
_FIRST_WORD = re.compile(r"\s*([A-Za-z_]+)")


class _Tokenizer(MySQL.Tokenizer):
    # sqlglot reads the rest of a statement after some commands (CALL, PREPARE, EXECUTE,
    # REPLACE, RENAME, ...) as one string, for its parser; a fingerprint needs their tokens
    # (else every REPLACE would be one class).
    COMMANDS: ClassVar[set[TokenType]] = set()


_tokenizer = _Tokenizer()


@dataclass(slots=True)
class _Word:
    """One piece of a fingerprint: its text, whether the SQL had space before it, and
    whether it is a value (`?`) or a name (both decide the spacing and the list rules)."""

    text: str
    gap: bool
    kind: str  # "value", "name", "word" (keywords, operators, punctuation)


def fingerprint(sql: str) -> str:
    """The statement's class as text: its words and names, never its values."""
    if "/*!" in sql or "/*M!" in sql:
        sql = _EXECUTABLE.sub(r" \1 ", sql)
    try:
        tokens = _tokenizer.tokenize(sql)
    except TokenError:
        # An unterminated string or comment (a log cut inside a statement): the verb alone.
        verb = _FIRST_WORD.match(sql)
        return f"{verb.group(1).lower() if verb else '?'} /* unreadable */"
    words = _collapse(_words(tokens))
    if words and words[0].text == "use":
        return "use ?"
    while words and words[-1].text == ";":
        words.pop()
    text = _join(_repeated_union(words))
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode("utf-8")


def fingerprint_id(fingerprint_text: str) -> str:
    """A short stable id for a fingerprint (16 hex digits), to name a class in reports."""
    return hashlib.blake2b(fingerprint_text.encode("utf-8", "surrogateescape"),
                           digest_size=8).hexdigest()


def _words(tokens: list[Token]) -> list[_Word]:
    """The tokens as fingerprint words: values as `?`, signs folded into their numbers."""
    words: list[_Word] = []
    add = words.append
    previous_kind: TokenType | None = None
    previous_end = -2
    last = len(tokens) - 1
    sign_start: int | None = None  # where a sign folded into the next number began
    for index, token in enumerate(tokens):
        kind = token.token_type
        gap = token.start > previous_end + 1
        if sign_start is not None:
            add(_Word("?", sign_start > _end(tokens, index - 2) + 1, "value"))
            sign_start = None
        elif kind in _VALUES:
            if previous_kind is not _T.INTRODUCER:  # `_utf8mb4'x'` is one value
                add(_Word("?", gap, "value"))
        elif kind in _SIGNS and index < last and tokens[index + 1].token_type is _T.NUMBER \
                and previous_kind not in _NOT_OPERANDS:
            sign_start = token.start  # `-1` after an operator, not `a - 1`
        elif kind is _T.NULL:
            after_is = previous_kind is _T.IS or previous_kind is _T.NOT
            add(_Word("null", gap, "word") if after_is else _Word("?", gap, "value"))
        elif kind in _NAMES:
            add(_Word(_name(token), gap, "name"))
        elif kind is _T.HINT:
            add(_Word(_hint(token.text), gap, "word"))
        elif kind is not _T.ASC:
            add(_Word(token.text.lower(), gap, "word"))
        previous_kind, previous_end = kind, token.end
    return words


def _end(tokens: list[Token], index: int) -> int:
    return tokens[index].end if index >= 0 else -2


def _name(token: Token) -> str:
    name = token.text.lower()
    if token.token_type == _T.IDENTIFIER and not _PLAIN_NAME.match(name):
        return "`" + name.replace("`", "``") + "`"
    return name


def _hint(text: str) -> str:
    return " ".join(_HINT_VALUES.sub("?", text.lower()).split())


def _collapse(words: list[_Word]) -> list[_Word]:
    """`in (?, ?)` → `in(?+)`; `values (?, ?), (?, ?)` → `values(?+)`; equal rows → one."""
    out: list[_Word] = []
    index = 0
    while index < len(words):
        word = words[index]
        out.append(word)
        index += 1
        if word.text in ("in", "values", "value") and index < len(words) \
                and words[index].text == "(":
            index = _collapse_list(words, index, out, many_rows=word.text != "in")
    return out


def _collapse_list(words: list[_Word], index: int, out: list[_Word], many_rows: bool) -> int:
    """Collapse the parenthesised row(s) at words[index]; returns where reading goes on."""
    rows: list[list[_Word]] = []
    cursor = index
    while True:
        end = _closing(words, cursor)
        if end is None:
            return index
        rows.append(words[cursor:end + 1])
        cursor = end + 1
        if not (many_rows and cursor + 1 < len(words) and words[cursor].text == ","
                and words[cursor + 1].text == "("):
            break
        cursor += 1
    if all(_only_values(row) for row in rows):
        out.append(_Word("(?+)", False, "word"))
        return cursor
    if len(rows) > 1 and all(_texts(row) == _texts(rows[0]) for row in rows):
        out.extend(rows[0])
        return cursor
    return index


def _closing(words: list[_Word], start: int) -> int | None:
    depth = 0
    for position in range(start, len(words)):
        text = words[position].text
        if text == "(":
            depth += 1
        elif text == ")":
            depth -= 1
            if depth == 0:
                return position
    return None


def _only_values(row: list[_Word]) -> bool:
    return all(word.kind == "value" or word.text == "," for word in row[1:-1])


def _texts(row: list[_Word]) -> list[str]:
    return [word.text for word in row]


def _repeated_union(words: list[_Word]) -> list[_Word]:
    """`A union A union A` → `A /*repeat union*/`: one class however many equal parts were
    joined (a generated statement), as pt-query-digest does."""
    if not any(word.text == "union" for word in words):
        return words
    parts: list[list[str]] = [[]]
    joiners: set[str] = set()
    depth = 0
    index = 0
    while index < len(words):
        text = words[index].text
        depth += (text == "(") - (text == ")")
        if text == "union" and depth == 0:
            joiner = "union all" if index + 1 < len(words) and words[index + 1].text == "all" \
                else "union"
            joiners.add(joiner)
            index += 2 if joiner == "union all" else 1
            parts.append([])
            continue
        parts[-1].append(text)
        index += 1
    if len(joiners) != 1 or any(part != parts[0] for part in parts):
        return words
    first = len(parts[0])
    return [*words[:first], _Word(f"/*repeat {joiners.pop()}*/", True, "word")]


def _join(words: list[_Word]) -> str:
    parts: list[str] = []
    previous: _Word | None = None
    for word in words:
        if previous is not None and _spaced(previous, word):
            parts.append(" ")
        parts.append(word.text)
        previous = word
    return "".join(parts)


def _spaced(previous: _Word, word: _Word) -> bool:
    """knoblab's spacing: the same statement written two ways gets one fingerprint."""
    if word.text in (",", ")", ";", ".") or previous.text in ("(", ".", "@", "@@"):
        return False
    if word.text in ("(", "(?+)"):
        # A function call or a table's column list sticks; a keyword keeps what was written.
        return previous.kind == "word" and word.gap and previous.text not in ("in", "values",
                                                                              "value")
    return True


# --- a prepared statement's form ---------------------------------------------------------------

class _NoBackslashEscapes(_Tokenizer):
    # sql_mode NO_BACKSLASH_ESCAPES: a backslash is a character like any other in a string; a
    # doubled quote is the only escape.
    STRING_ESCAPES: ClassVar[list[str]] = ["'", '"']


_no_backslash_tokenizer = _NoBackslashEscapes()

# A number right after one of these is no value a placeholder could take: a position
# (ORDER BY 1) or a type's length (CHAR(10)), to the end of its list.
_POSITIONS = frozenset({_T.ORDER_BY, _T.GROUP_BY})
_TYPE_WORDS = frozenset({
    "char", "varchar", "nchar", "nvarchar", "binary", "varbinary", "decimal", "dec", "numeric",
    "fixed", "float", "double", "real", "int", "integer", "bigint", "tinyint", "smallint",
    "mediumint", "bit", "datetime", "time", "timestamp", "year", "text", "blob"})
# A string right after one of these words is syntax, not a value: a typed literal (DATE
# '2025-11-25'), an alias (AS 'total'), a collation's name.
_STRING_SYNTAX = frozenset({"date", "time", "timestamp", "as", "collate"})
# What a name or a closing parenthesis followed by "." and a number is: a name (t.1), not .1
_QUALIFIED = _NAMES | {_T.R_PAREN}
_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a",
            "%": "\\%", "_": "\\_"}
# A parameter's type, as the replay binds it: what the server makes of the literal's text (an
# integer that fits BIGINT or BIGINT UNSIGNED, a DECIMAL, a DOUBLE when in exponent form, a
# string).
INTEGER, UNSIGNED, DECIMAL, DOUBLE, STRING = b"i", b"u", b"d", b"f", b"s"
_INT64, _UINT64 = 1 << 63, 1 << 64
_SETS_PER_STATEMENT = re.compile(r"\s*set\s+statement\b", re.IGNORECASE)


@dataclass(frozen=True)
class Prepared:
    """A statement the application ran as a server-side prepared statement (an Execute in
    the general log, which shows it with its values in place): the text to prepare, its
    numbers and strings as placeholders, and their values (type, bytes: an integer as 8
    little-endian bytes, a DOUBLE as its 8 IEEE bytes, a decimal number as its text, a
    string as its bytes). `backslashes` says how its strings were read: as escapes (True,
    the server's default), as characters (False: NO_BACKSLASH_ESCAPES), or None when it
    holds no backslash and reads the same either way."""

    template: str
    parameters: tuple[tuple[bytes, bytes], ...]
    backslashes: bool | None = None


def prepared_form(sql: str, backslash_escapes: bool = True) -> Prepared | None:
    """The statement as an application would have prepared it, read as the server reads it
    in the session's sql_mode (`backslash_escapes`: NO_BACKSLASH_ESCAPES off): each number
    and single-quoted string a placeholder bound as what the literal is to the server;
    None when it cannot be read. What stays as written, for the server to read as it reads
    the text: NULL, TRUE, hex and bit values, national and introduced strings, double-quoted
    ones (a name under ANSI_QUOTES; a logged parameter is always single-quoted), an empty
    string (NULL under EMPTY_STRING_IS_NULL), the string of a typed literal, alias or
    collation, and a number the server would refuse. The prepared text may hold more
    placeholders than the application's did (its `k + 1` becomes `k + ?`): each takes the
    value it had."""
    tokenizer = _tokenizer if backslash_escapes else _no_backslash_tokenizer
    try:
        tokens = tokenizer.tokenize(sql)
    except TokenError:
        return None
    backslashes = backslash_escapes if "\\" in sql else None
    if backslashes is not None and _SETS_PER_STATEMENT.match(sql) and "sql_mode" in sql.lower():
        return None  # read in the sql_mode it sets for itself, which the session does not say
    if backslash_escapes and any(
            token.token_type == _T.STRING and sql[token.start] == '"' and "\\" in
            sql[token.start:token.end + 1] for token in tokens):
        # A name under ANSI_QUOTES, where a backslash escapes nothing: where it ends
        # depends on a mode the replay cannot see.
        return None
    pieces: list[str] = []
    parameters: list[tuple[bytes, bytes]] = []
    last = 0
    position = in_type = False
    previous: Token | None = None
    index = 0
    while index < len(tokens):
        token = tokens[index]
        kind = token.token_type
        start, end = token.start, token.end
        parameter: tuple[bytes, bytes] | None = None
        if kind == _T.NUMBER and not (position or in_type):
            after_dot = previous is not None and previous.token_type == _T.DOT and \
                previous.end + 1 == start
            if not after_dot:
                parameter = _number(sql[start:end + 1])
            elif index < 2 or tokens[index - 2].token_type not in _QUALIFIED:
                start = tokens[index - 1].start  # `.5`: the dot is the number's
                parameter = _number(sql[start:end + 1])
            # else `t.5`: a name
        elif kind == _T.STRING and not (
                previous is not None and (previous.token_type == _T.INTRODUCER
                                          or previous.text.lower() in _STRING_SYNTAX)):
            # Strings side by side are one value to the server ('a' 'b' is 'ab').
            run = index
            while run + 1 < len(tokens) and tokens[run + 1].token_type == _T.STRING:
                run += 1
            quoted = [sql[t.start:t.end + 1] for t in tokens[index:run + 1]]
            value = b"".join(_unquoted(text, backslash_escapes) for text in quoted)
            if all(text[0] == "'" for text in quoted) and value:
                parameter = (STRING, value)
            index, token, end = run, tokens[run], tokens[run].end
        if kind in _POSITIONS:
            position = True
        elif kind not in (_T.NUMBER, _T.COMMA, _T.ASC, _T.DESC):
            position = False
        if kind == _T.L_PAREN and previous is not None and \
                previous.text.lower() in _TYPE_WORDS:
            in_type = True
        elif kind == _T.R_PAREN:
            in_type = False
        previous = token
        index += 1
        if parameter is None:
            continue
        pieces.append(sql[last:start])
        pieces.append("?")
        last = end + 1
        parameters.append(parameter)
    pieces.append(sql[last:])
    return Prepared("".join(pieces), tuple(parameters), backslashes)


def without_values(sql: str) -> bool:
    """Whether the statement holds placeholders where its values would be: how the logs show
    the execution of a statement prepared while they were off (MariaDB writes a prepared
    statement's values into the log only when the log was on as it was prepared)."""
    if "?" not in sql:
        return False
    try:
        return any(token.token_type == _T.PLACEHOLDER for token in _tokenizer.tokenize(sql))
    except TokenError:
        return False


def session_sql_mode(sql: str) -> str | None:
    """The sql_mode a statement gives its session, when it sets one the text says: the
    mode's words ('' for DEFAULT: the server's own, taken as the default one); None when it
    sets none, or one only the server can work out (an expression)."""
    if sql.lstrip()[:3].lower() != "set" or "sql_mode" not in sql.lower() or \
            _SETS_PER_STATEMENT.match(sql):
        return None
    try:
        tokens = _tokenizer.tokenize(sql)
    except TokenError:
        return None
    found = None
    for index, token in enumerate(tokens):
        if token.text.lower() != "sql_mode" or token.token_type not in _NAMES or \
                tokens[index - 1].token_type == _T.PARAMETER:  # @sql_mode: a user variable
            continue
        # Its scope: the words since the SET or the comma before it.
        scope = index - 1
        while scope > 0 and tokens[scope].token_type not in (_T.SET, _T.COMMA):
            scope -= 1
        if any(t.text.lower() == "global" for t in tokens[scope:index]):
            continue  # not the session's (and a replay leaves a global SET out)
        values = []
        after = index + 2
        while after < len(tokens) and tokens[after].token_type != _T.COMMA:
            values.append(tokens[after])
            after += 1
        if index + 1 >= len(tokens) or tokens[index + 1].token_type not in (_T.EQ, _T.COLON_EQ):
            return None
        if values and all(t.token_type == _T.STRING for t in values):
            found = "".join(t.text for t in values)
        elif len(values) == 1 and values[0].text.lower() == "default":
            found = ""
        else:
            return None
    return found


def _number(text: str) -> tuple[bytes, bytes] | None:
    """A number's parameter: what the server makes of its text (None: it refuses it, and
    it stays in the text, for the server to say so)."""
    if "e" in text or "E" in text:
        value = float(text)
        return (DOUBLE, struct.pack("<d", value)) if math.isfinite(value) else None
    if text.isdigit():
        whole = int(text)
        if whole < _INT64:
            return INTEGER, whole.to_bytes(8, "little", signed=True)
        if whole < _UINT64:
            return UNSIGNED, whole.to_bytes(8, "little")
    return DECIMAL, text.encode()


def _unquoted(literal: str, backslash_escapes: bool = True) -> bytes:
    """A quoted string's value as the server reads it: backslash escapes (unless
    NO_BACKSLASH_ESCAPES), a doubled quote."""
    quote, body = literal[0], literal[1:-1]
    out, i = [], 0
    while i < len(body):
        char = body[i]
        if backslash_escapes and char == "\\" and i + 1 < len(body):
            out.append(_ESCAPES.get(body[i + 1], body[i + 1]))
            i += 2
        elif char == quote and body[i + 1:i + 2] == quote:
            out.append(quote)
            i += 2
        else:
            out.append(char)
            i += 1
    return "".join(out).encode("utf-8", "surrogateescape")
