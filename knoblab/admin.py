"""Statements a workload may not hold: those that change what knoblab relies on.

Workload SQL is arbitrary by design, but some statements are never part of the work under test
and undo what a measurement needs: the server itself (SHUTDOWN), knoblab's connections (KILL),
the settings knoblab sets and reads back (SET GLOBAL), the counters and locks it measures with
(FLUSH, RESET), the account it logs in with (user and privilege statements), its database
(DROP DATABASE) and the server's code (INSTALL PLUGIN). These are refused when the spec is read,
naming the statement.

This is the cheap, certain part: a statement hidden in a string (PREPARE, EXECUTE IMMEDIATE)
or in a stored routine is not seen here. What a measurement changed is also checked after it
(`knoblab.server.guard`), which fails that measurement with the reason.
"""

from __future__ import annotations

import re

from knoblab.errors import UserError

# Strings and quoted names, executable-comment markers (their content runs), comments.
_TEXT = re.compile(r"""'(?:[^'\\]|\\.|'')*'?|"(?:[^"\\]|\\.|"")*"?|`(?:[^`]|``)*`?"""
                   r"""|/\*M?!\d*|/\*.*?(?:\*/|$)|\*/|(?:--(?=\s|$)|\#)[^\n]*""", re.DOTALL)

_WHY_SETTINGS = ("it changes the server's global settings, which knoblab sets for each point "
                 "and reads back; put server settings in the spec: [server.config] (every "
                 "point), [sweep], [[step]] or [tune.knobs] (SET SESSION is fine)")
_WHY_ACCOUNTS = ("it changes accounts or privileges, and knoblab logs in as root for every "
                 "measurement (on a running server, these are its users' accounts)")
_FORBIDDEN: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE | re.DOTALL), why) for pattern, why in (
        (r"SHUTDOWN\b", "it stops the server being measured"),
        (r"KILL\b", "it ends connections or statements, knoblab's own among them"),
        (r"SET\b.*(\bGLOBAL\b|@@GLOBAL\.|\bPERSIST(_ONLY)?\b)", _WHY_SETTINGS),
        (r"(FLUSH|RESET)\b", "FLUSH and RESET change the server state knoblab measures with "
                             "(its counters, caches, logs and locks)"),
        (r"((CREATE|DROP|ALTER|RENAME)\s+(USER|ROLE)|SET\s+PASSWORD|GRANT|REVOKE)\b",
         _WHY_ACCOUNTS),
        (r"(DROP|ALTER)\s+(DATABASE|SCHEMA)\b",
         "it drops or changes a database, and the data being measured is in knoblab's own"),
        (r"(INSTALL|UNINSTALL)\s+(PLUGIN|SONAME)\b",
         "it loads or unloads server code (plugins can open network ports)"),
    ))


def statements(sql: str) -> list[tuple[str, str]]:
    """Each statement of `sql` as written, and as matched: strings and quoted names blanked,
    comments dropped (an executable comment's content kept). Split on ';' — compound
    statements into their pieces."""
    def blank(match: re.Match[str]) -> str:
        text = match.group()
        if text[:1] in "'\"`":
            return text[:1] + "x" * (len(text) - 2) + text[-1:] if len(text) > 1 else text
        return " " * len(text)  # same length: the pieces of both texts line up

    blanked = _TEXT.sub(blank, sql)
    found, start = [], 0
    for end in [*(i for i, ch in enumerate(blanked) if ch == ";"), len(blanked)]:
        matched = " ".join(blanked[start:end].split())
        if matched:
            found.append((" ".join(sql[start:end].split()), matched))
        start = end + 1
    return found


def refuse_admin(sql: str, where: str) -> None:
    """UserError naming the first statement of `sql` a workload may not hold, and why."""
    for written, statement in statements(sql):
        if (why := _why(statement)) is not None:
            shown = written if len(written) <= 80 else written[:77] + "..."
            raise UserError(f"{where}: {shown!r} cannot be part of a workload: {why}; "
                            "remove it")


def forbidden(sql: str) -> str | None:
    """Why `sql` may not be part of a workload (the first such statement's reason), or None."""
    for _, statement in statements(sql):
        if (why := _why(statement)) is not None:
            return why
    return None


def _why(statement: str) -> str | None:
    for pattern, why in _FORBIDDEN:
        if pattern.match(statement):
            return why
    return None
