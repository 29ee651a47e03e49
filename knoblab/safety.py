"""Refuse what should not run: durability given up without consent, memory the machine lacks.

Every knob has a class: "durability" (some value lets a crash lose or corrupt committed data),
"resource" (it sizes memory or disk use) or "safe". A spec whose points give up durability runs
only with `[server] allow_durability_tradeoff = true`; a configuration whose estimated memory is
over the budget (80% of RAM unless `[server] memory_budget` says otherwise) is refused, with the
estimate broken down, before any server starts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import psutil

from knoblab.catalog import Catalog
from knoblab.errors import UserError
from knoblab.units import format_size

# value (as the server's config takes it) -> what a crash can cost with it, or None if safe.
DURABILITY: dict[str, Callable[[str], str | None]] = {
    "innodb_flush_log_at_trx_commit": lambda v: None if v in ("1", "3") else
    "a crash can lose the last second of committed transactions",
    "sync_binlog": lambda v: None if v == "1" else
    "a crash can lose binary-log events of committed transactions",
    "innodb_doublewrite": lambda v: None if v.upper() not in ("OFF", "0") else
    "a crash during a page write can leave torn, unrecoverable pages",
    "innodb_flush_method": lambda v: "data and log writes are not synced to disk"
    if v.lower() in ("nosync", "littlesync") else None,
    "delay_key_write": lambda v: "a crash can leave MyISAM indexes corrupt"
    if v.upper() == "ALL" else None,
}
RESOURCE = re.compile(r"(_size|_buffer|buffer_|_cache|cache_|max_connections|_pool|_stack)")

SERVER_BASELINE = 128 << 20  # an idle sandbox's resident memory beyond its buffers (~100 MB)
GLOBAL_BUFFERS = ("innodb_buffer_pool_size", "key_buffer_size", "aria_pagecache_buffer_size",
                  "innodb_log_buffer_size", "query_cache_size")
SESSION_BUFFERS = ("read_buffer_size", "read_rnd_buffer_size", "sort_buffer_size",
                   "join_buffer_size", "thread_stack", "net_buffer_length")


# What keeps a sandbox private and knoblab's own: its files, its socket, no network.
SANDBOX_OWNED = ("skip_networking", "port", "bind_address", "extra_port", "socket", "datadir",
                 "tmpdir", "pid_file", "log_error", "user", "basedir", "plugin_dir",
                 "secure_file_priv")

# Settings whose value is a path (a file or a folder the server writes or reads). A sandbox's
# server runs as root: any of them could write outside the sandbox's folder (a general log in
# /etc), so none is taken in a sandbox; left alone, each keeps its file inside the sandbox.
# Known by a text setting's name (…_file, …_dir, …_path, …) and by this list of the rest.
PATH_NAME = re.compile(r"(_file|dir|_path|_directory|_basename|_index|_filename)$")
PATH_SETTINGS = frozenset({
    "relay_log", "log_tc", "log_bin_basename", "relay_log_basename", "init_file",
    "ssl_ca", "ssl_capath", "ssl_cert", "ssl_key", "ssl_crl", "ssl_crlpath",
    "innodb_data_file_path", "innodb_temp_data_file_path", "innodb_buffer_pool_filename",
    "general_log_file", "slow_query_log_file", "log_slow_query_file", "aria_log_dir_path",
    "innodb_undo_directory", "innodb_tmpdir", "server_audit_file_path",
    "file_key_management_filename", "tls_version_file"})
TEXT_TYPES = ("VARCHAR", "")  # paths are text; a numeric or ON/OFF setting never is

# Events run SQL of their own at any moment (a SET GLOBAL of the setting being measured,
# say): a measurement would not run with its point's settings alone.
SANDBOX_REFUSED = {
    "event_scheduler": "events run SQL of their own at any moment and can change the "
                       "settings and data under a measurement; a sandbox keeps the event "
                       "scheduler off: remove it from the spec",
}


# Settings that would loosen what confines the untrusted SQL a sandbox runs (a dump, a
# replayed log, a script): the sandbox holds each at its own value, whatever a spec says.
CONFINEMENT = {
    "local_infile": "a sandbox holds it OFF, so that no SQL it runs (a dump, a replayed log, "
                    "a script) makes a client read a file of this machine into the server "
                    "(LOAD DATA LOCAL INFILE)",
    "skip_grant_tables": "a sandbox keeps its accounts' privileges, which confine the data "
                         "account a dump and a replay run as",
    "allow_suspicious_udfs": "a sandbox loads no functions from libraries but the server's own",
    "plugin_maturity": "a sandbox loads no plugins but those built in",
}


# Settings of kinds that open the network whatever skip_networking says: a cluster (Galera
# listens on its own ports) and plugins loaded at start-up (some listen). A name list cannot
# know every such setting; every sandbox is also checked for listening sockets once started.
OPENS_NETWORK = re.compile(r"^(wsrep_|plugin_load)")


def path_setting(name: str, catalog: Catalog | None = None) -> bool:
    """Whether the setting's value is a path (decided by name, for a text setting)."""
    if name in PATH_SETTINGS:
        return True
    knob = catalog.knobs.get(name) if catalog is not None else None
    return bool(PATH_NAME.search(name)) and (knob is None or knob.type in TEXT_TYPES)


def check_sandbox_owned(names: list[str], catalog: Catalog | None = None) -> None:
    for name in names:
        if name in SANDBOX_OWNED:
            raise UserError(f"{name} is set by knoblab itself: a sandbox keeps its files in "
                            "its own folder and listens only on a private socket, never on the "
                            "network; remove it from the spec")
        if OPENS_NETWORK.match(name):
            raise UserError(f"{name}: settings of clusters and of plugins loaded at start-up "
                            "can open network ports, and a sandbox (root without a password) "
                            "never listens on the network; remove it, or measure it on a "
                            "running server ([server] kind = \"external\")")
        if path_setting(name, catalog):
            raise UserError(f"{name} takes a path: a sandbox's server runs as root and writes "
                            "only inside the sandbox's own folder, where it keeps this file "
                            "by default; remove it from the spec, or measure it on a running "
                            "server ([server] kind = \"external\")")
        if name in CONFINEMENT:
            raise UserError(f"{name}: {CONFINEMENT[name]}; remove it from the spec")
        if name in SANDBOX_REFUSED:
            raise UserError(f"{name}: {SANDBOX_REFUSED[name]}")


def safety_class(name: str) -> str:
    if name in DURABILITY:
        return "durability"
    return "resource" if RESOURCE.search(name) else "safe"


def durability_costs(settings: Mapping[str, str]) -> dict[str, str]:
    """For each setting that gives up durability at its value: what a crash can cost."""
    costs = {}
    for name, value in settings.items():
        rule = DURABILITY.get(name)
        cost = rule(str(value)) if rule else None
        if cost:
            costs[name] = cost
    return costs


@dataclass(frozen=True)
class MemoryEstimate:
    total: int
    parts: list[tuple[str, int]]  # (what, bytes), largest first

    def describe(self) -> str:
        return " + ".join(f"{what} {format_size_rounded(size)}" for what, size in self.parts)


def estimate_memory(settings: Mapping[str, str], catalog: Catalog,
                    connections: int, defaults: bool = True) -> MemoryEstimate:
    """Global buffers + per-connection buffers × connections + the server's own baseline;
    with `defaults` false, only the buffers `settings` give are counted."""
    def value(name: str) -> int:
        raw = settings.get(name)
        if raw is None and defaults:
            knob = catalog.knobs.get(name)
            raw = knob.default if knob else None
        try:
            return int(float(raw)) if raw is not None else 0
        except ValueError:
            return 0

    parts = [(name, value(name)) for name in GLOBAL_BUFFERS if value(name)]
    per_session = sum(value(name) for name in SESSION_BUFFERS)
    # An in-memory temporary table may grow to the smaller of the two before going to disk.
    temp_table = min(value("tmp_table_size") or 0, value("max_heap_table_size") or 0)
    per_connection = per_session + temp_table
    parts.append((f"{connections} connections × {format_size_rounded(per_connection)} "
                  "(session buffers and a temporary table)", per_connection * connections))
    parts.append(("server baseline", SERVER_BASELINE))
    parts.sort(key=lambda part: -part[1])
    return MemoryEstimate(sum(size for _, size in parts), parts)


def memory_budget_of(memory_budget: int | None) -> int:
    """[server] memory_budget, or 80% of this machine's memory."""
    return memory_budget or int(psutil.virtual_memory().total * 0.8)


def check(points: list[tuple[dict[str, str], dict[str, str]]], base: dict[str, str],
          catalog: Catalog, *, connections: Callable[[dict[str, str]], int],
          allow_durability_tradeoff: bool, memory_budget: int | None,
          check_memory: bool = True, machine_memory: int | None = None) -> None:
    """UserError for the first point that gives up durability without consent or won't fit
    ([server] memory_budget, else the sandbox's [machine] memory, else 80% of this
    machine's)."""
    budget = memory_budget_of(memory_budget or machine_memory)
    where = "[server] memory_budget" if memory_budget else \
        "[machine] memory" if machine_memory else "80% of this machine's memory"
    # In a sandbox the kernel holds to its [machine] memory, a server that outgrows it harms
    # nothing else: it is killed, and that configuration fails saying so. So only what the
    # spec asks for is held against the machine up front; the server's own default caches,
    # filled only as a workload uses them, are left to the kernel's limit.
    kernel_limited = bool(machine_memory) and not memory_budget
    fix = "lower the values or set [server] memory_budget" if not kernel_limited else \
        "lower the values, give the machine more memory, or set [server] memory_budget"
    for requested, config in points:
        settings = {**base, **config}
        label = ", ".join(f"{k}={v}" for k, v in requested.items()) or "the base configuration"
        costs = durability_costs(settings)
        if costs and not allow_durability_tradeoff:
            name, cost = next(iter(costs.items()))
            # Named where it was written: a point's own value, or [server.config] (every
            # point's), which no point's label describes.
            written = f"{label}: {name}" if name in config else f"[server.config] {name}"
            raise UserError(
                f"{written} = {settings[name]} gives up durability ({cost}); if that is "
                "a trade-off you accept, set allow_durability_tradeoff = true in [server]")
        if not check_memory:
            continue
        estimate = estimate_memory(settings, catalog, connections(requested),
                                   defaults=not kernel_limited)
        if estimate.total > budget:
            # [server.config] over the budget by itself is every point's doing, not this one's
            alone = estimate_memory(base, catalog, connections(requested),
                                    defaults=not kernel_limited) if base else None
            if alone is not None and alone.total > budget:
                label, estimate = "[server.config]", alone
            raise UserError(
                f"{label}: estimated memory {format_size_rounded(estimate.total)} is over the "
                f"budget of {format_size_rounded(budget)} ({where}): {estimate.describe()}; "
                f"{fix}")


def format_size_rounded(n: int) -> str:
    """Sizes for people: exact K/M/G when exact, else one decimal in the largest unit."""
    exact = format_size(n)
    if exact != str(n):
        return exact
    for unit, shift in (("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f}{unit}"
    return f"{n}B"
