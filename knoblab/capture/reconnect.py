"""A pool's connections ended one at a time, each caught idle between transactions, so that
the pool opens new ones while the log is on (`knoblab capture --reconnect idle`).

A pool that prepared its statements on the server before the window runs them as
executions the log shows without their values: MariaDB expands a prepared statement's values
into the log only when a log was on as it was prepared. A pool reconnects a connection it
finds closed (Go's database/sql, HikariCP; benchmarks/pooled.lua makes sysbench one) and
prepares its statements again on the new one, where the log sees their values. Ending
each connection only once it has slept IDLE_FOR_MS, with no InnoDB transaction that locked
or wrote, ends none of its writes; the first connection its pool does not replace
ends the reconnecting (the application may not reconnect at all), and the capture says so."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pymysql

# How long a connection is watched for a moment idle between transactions in one pass over
# them (a pool's idle connection is so at once; a busy one between two of its transactions,
# within milliseconds, or later), and how long the passes go on in all (at most the window's
# own length).
CATCH_EACH = 2.0
TRY_WITHIN = 30.0
# How long it must have slept, in ms, to be taken as between transactions: a transaction's
# statements follow one another within a millisecond, and whether one that has only read is
# in InnoDB's list of transactions cannot be relied on (MariaDB 10.11), so that its sleep is
# what tells them apart.
# A connection that never sleeps so long (a closed loop at full speed) is left as it is.
IDLE_FOR_MS = 5.0
# How long its pool is given to open a connection in place of one ended. A pool that
# reconnects on its next use of it does so at once under load.
BACK_WITHIN = 10.0
# How often a connection's state is read while waiting for it.
POLL = 0.005


@dataclass
class Reconnected:
    """What the reconnecting did: the connections ended (their pool replaced each), those
    never caught idle between transactions (left as they were), and why it stopped early."""

    ended: list[int] = field(default_factory=list)
    busy: list[int] = field(default_factory=list)
    stopped: str | None = None
    seconds: float = 0.0
    within: float = TRY_WITHIN

    def said(self) -> str:
        text = (f"reconnected {len(self.ended)} connection(s) in {self.seconds:.1f} s: each "
                f"ended once idle {IDLE_FOR_MS:g} ms with no transaction that locked or wrote, "
                "and its pool opened a new one, whose statements the log sees with their "
                "values")
        if self.busy:
            text += (f"; {len(self.busy)} never idle so within {self.within:g} s, left as "
                     "they were")
        if self.stopped:
            text += f"; stopped: {self.stopped}"
        return text

    def describe(self) -> dict[str, Any]:
        return {"ended": self.ended, "busy": self.busy, "stopped": self.stopped,
                "seconds": round(self.seconds, 2)}


def reconnect_idle(cur: Any, threads: Iterable[int], mine: set[int],
                   within: float = TRY_WITHIN) -> Reconnected:
    """Each of `threads` (connections open before the window) ended when caught idle
    between transactions, then its pool given BACK_WITHIN seconds to open another of the
    same user; those not caught within CATCH_EACH seconds are watched again, pass after
    pass, for at most `within` seconds in all. `mine`: knoblab's own connections, never
    counted as the pool's."""
    began, done = time.monotonic(), Reconnected(within=within)
    waiting = sorted(threads)
    while waiting and done.stopped is None:
        busy = []
        for thread in waiting:
            left = within - (time.monotonic() - began)
            user = _user(cur, thread)
            if user is None:
                continue  # it closed meanwhile: nothing to do
            before = _of_user(cur, user, mine)
            if left <= 0 or not _catch_idle(cur, thread, min(CATCH_EACH, left)):
                busy.append(thread)
                continue
            try:
                cur.execute("KILL CONNECTION %s", (thread,))
            except pymysql.MySQLError as exc:
                if exc.args and exc.args[0] == 1094:  # unknown thread: it closed meanwhile
                    continue
                raise
            done.ended.append(thread)
            if not _back(cur, user, before, mine):
                done.stopped = (f"no connection of {user} was opened in place of {thread} "
                                f"within {BACK_WITHIN:g} s: its application may not "
                                "reconnect, so no other connection is ended")
                break
        if time.monotonic() - began >= within:
            done.busy = busy
            break
        waiting = busy
    done.seconds = time.monotonic() - began
    return done


def _user(cur: Any, thread: int) -> str | None:
    cur.execute("SELECT USER FROM information_schema.PROCESSLIST WHERE ID = %s", (thread,))
    row = cur.fetchone()
    return None if row is None else str(row[0])


def _of_user(cur: Any, user: str, mine: set[int]) -> set[int]:
    cur.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = %s AND "
                "COMMAND <> 'Killed'", (user,))
    return {int(row[0]) for row in cur.fetchall()} - mine


def _catch_idle(cur: Any, thread: int, within: float) -> bool:
    """Whether `thread` was seen sleeping for IDLE_FOR_MS or more with no InnoDB transaction
    that holds locks or wrote (one look at both), within `within` seconds. A transaction
    that has only read holds nothing an end would undo, and InnoDB lists it or not (seen
    both ways, one connection listed for seconds at a time): the time asleep is what tells
    it from a connection between transactions, whose statements follow one another within
    a millisecond."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        cur.execute("SELECT p.COMMAND, p.TIME_MS, (SELECT COUNT(*) FROM "
                    "information_schema.INNODB_TRX t WHERE t.trx_mysql_thread_id = p.ID AND "
                    "(t.trx_rows_modified > 0 OR t.trx_lock_structs > 0 OR "
                    "t.trx_tables_locked > 0)) FROM information_schema.PROCESSLIST p "
                    "WHERE p.ID = %s", (thread,))
        row = cur.fetchone()
        if row is None:
            return False
        command, asleep, transactions = row
        if command == "Sleep" and float(asleep) >= IDLE_FOR_MS and int(transactions) == 0:
            return True
        time.sleep(POLL)
    return False


def _back(cur: Any, user: str, before: set[int], mine: set[int]) -> bool:
    """Whether a connection of `user` not among those open `before` the one ended was
    opened within BACK_WITHIN seconds (the one ended may still be listed as it exits)."""
    deadline = time.monotonic() + BACK_WITHIN
    while time.monotonic() < deadline:
        if _of_user(cur, user, mine) - before:
            return True
        time.sleep(0.05)
    return False
