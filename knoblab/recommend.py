"""What is recommended, and why each setting is in it: the one place that answers "why is this
setting in my.cnf".

A configuration is recommended only when its validation showed it better than the baseline
(knoblab.search.proof). A change must be shown to help: the reduction puts each setting back
alone, and the configuration without those of no measurable effect is the recommendation
unless the full one was shown better than it by at least min_effect (`Reduction.kept` holds
what was decided). A setting whose cost the workload cannot see (`UNSEEN_COST`) is never
recommended, however it measured.

What a user is told to apply is the set of settings that were in force when it was measured
(`in_force`): [server.config], the changes on top, and every [tie] follower at its leader's
value. The search's trials and checks (knoblab.search.loop.ties), tune's my.cnf and JSON and
the sweep's recommended.cnf (knoblab.report.document) all read it from here.

A recommendation carries only what was measured of it (`claim`): the validated candidate's
gain when all of it is recommended; when the reduction dropped some of its settings, the gain
of the reduced configuration itself against the baseline (its confirmation), or, when that
was not measured, words saying that the figure is the full candidate's. A reduced
configuration whose confirmation did not show it better is not recommended: the validated
candidate is, whole (`Reduction.unconfirmed` holds what the reduction chose).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from knoblab.records import Effect, Reduction, TuneResult, Validation

# Settings whose cost lies outside what a benchmark of one workload measures: a sandbox has a
# handful of clients, a few tables and no network between them, so raising or lowering these
# shows no cost there while it can refuse connections, block hosts, reject statements or spend
# memory and file handles in production. A measured gain does not make them safe, so they are
# never recommended: the report names them and says why.
_CONNECTIONS = ("a connection limit: the benchmark opens a few connections, a production server "
                "at the limit refuses the next one")
_TABLES = "sized for the tables of the whole server, not the few this workload touches"
UNSEEN_COST: dict[str, str] = {
    "max_connections": _CONNECTIONS,
    "max_user_connections": _CONNECTIONS,
    "max_connect_errors": ("blocks a host after that many failed connections: the benchmark's "
                           "connections never fail"),
    "back_log": "the queue of connections arriving at once: the benchmark's arrive one by one",
    "max_allowed_packet": ("the largest statement or row the server accepts: the benchmark's "
                           "are small, another client's may be refused"),
    "thread_cache_size": ("threads kept for new connections: the benchmark keeps its "
                          "connections, production clients come and go"),
    "table_open_cache": _TABLES,
    "table_open_cache_instances": _TABLES,
    "table_definition_cache": _TABLES,
    "open_files_limit": "file handles of the whole server and its host, not this workload's",
}


def name(written: str) -> str:
    """A setting's name as the server lists it (the spec may write dashes or capitals)."""
    return written.strip().lower().replace("-", "_")


def never_recommended(settings: list[str]) -> dict[str, str]:
    """Those of `settings` that are never recommended, each with why (UNSEEN_COST): a search
    over one pays for trials whose finding cannot be used."""
    return {k: UNSEEN_COST[name(k)] for k in settings if name(k) in UNSEEN_COST}


def in_force(changes: Mapping[str, str], tied: Mapping[str, str],
             base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings in force for a configuration: `base` ([server.config]), `changes` on top,
    and each [tie] follower (`tied`: follower -> leader) at its leader's value wherever the
    leader is set; every trial and check measured its configuration so."""
    settings = {name(k): v for k, v in (base or {}).items()}
    settings.update({name(k): v for k, v in changes.items()})
    for follower, leader in tied.items():
        if name(leader) in settings:
            settings[name(follower)] = settings[name(leader)]
    return settings


def shown(changes: Mapping[str, str], effects: list[Effect]) -> dict[str, str]:
    """The settings shown to matter: measurable when put back alone; when none is (effects
    that need each other), all of them, since the validation showed them better together.
    Never a setting whose cost the workload cannot see."""
    measurable = {e.name for e in effects if e.measurable}
    kept = {k: v for k, v in changes.items() if k in measurable} if measurable else \
        dict(changes)
    return {k: v for k, v in kept.items() if name(k) not in UNSEEN_COST}


def decided(chosen: Validation, reduction: Reduction | None) -> dict[str, str]:
    """The searched settings decided on for the validated candidate `chosen`: the reduction's
    (the reduced configuration unless the full one was shown better), else all of its own.
    Those of UNSEEN_COST are still among them."""
    return dict(reduction.kept) if reduction is not None else dict(chosen.trial.changes)


def searched(decided_changes: Mapping[str, str]) -> dict[str, str]:
    """The searched settings recommended of those decided on: all but those of UNSEEN_COST."""
    return {k: v for k, v in decided_changes.items() if name(k) not in UNSEEN_COST}


def changes(result: TuneResult) -> dict[str, str]:
    """The searched settings decided on (`decided`); none when no candidate was shown better
    than the baseline. Those of UNSEEN_COST are still among them (`unseen`)."""
    chosen = result.recommended
    return {} if chosen is None else decided(chosen, result.reduction)


def claim(result: TuneResult) -> Validation | None:
    """The measurement against the baseline that a recommendation carries: the
    recommendation's own confirmation (`result.confirmation`, exactly its settings, measured
    again after it was chosen) when there is one; else the validated candidate's when all of
    it is recommended (or nothing is); None when a recommendation that is
    not the validated candidate was not measured as itself: the validated figure is then
    another configuration's, and must be said to be."""
    chosen = result.recommended
    if chosen is None:
        return None
    wanted = searched(changes(result))
    own = result.confirmation
    if own is not None and own.trial.changes == wanted:
        return own  # measured again, in a run that played no part in choosing it
    if not wanted or wanted == chosen.trial.changes:
        return chosen
    return None


def unseen(result: TuneResult) -> dict[str, str]:
    """The decided settings that are not recommended, each with why (UNSEEN_COST)."""
    return never_recommended(list(changes(result)))


def left_as_they_are(result: TuneResult) -> list[str]:
    """The validated candidate's settings that go back to the baseline's value: no measurable
    effect, or a cost the workload cannot see."""
    chosen = result.recommended
    if chosen is None:
        return []
    kept = changes(result)
    return [k for k in chosen.trial.changes if k not in kept or name(k) in UNSEEN_COST]


def to_change(result: TuneResult) -> dict[str, str]:
    """The changes to make: the decided ones but those of unseen cost, each with the settings
    tied to it (they moved together in every measurement)."""
    return in_force(searched(changes(result)), result.tied)


def settings(result: TuneResult) -> dict[str, str]:
    """What to apply: the changes to make (`to_change`) on [server.config], as they were in
    force when measured; none when nothing is recommended."""
    wanted = to_change(result)
    if not wanted:
        return {}
    return in_force(wanted, result.tied, result.base)
