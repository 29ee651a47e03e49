"""The experiment runner: check everything, build the data once, then run every trial of the
plan, storing each as it ends; a run can be resumed and only the missing trials are run.

Four rooms: `checks` (the spec against each server and the machine, the points planned, the
design chosen, the data built), `life` (a run started, resumed, extended, owned), `loop` (the
measurement loop: blocks, starts, parts, outcomes) and `wording` (the command that goes on)."""

from knoblab.runner.checks import (
    Listener,
    OpenTargets,
    Prepared,
    check_not_fixed,
    check_points,
    check_settable,
    few_rounds,
    open_servers,
    plan_points,
    prepare,
    read_back,
)
from knoblab.runner.life import beating, extend_run, owning, resume_run, start_run
from knoblab.runner.loop import execute, measuring_seconds, plan_order
from knoblab.runner.wording import next_command, tune_command

__all__ = ["Listener", "OpenTargets", "Prepared", "beating",
           "check_not_fixed", "check_points", "check_settable", "execute", "extend_run",
           "few_rounds", "measuring_seconds", "next_command",
           "open_servers", "owning", "plan_order", "plan_points", "prepare", "read_back",
           "resume_run", "start_run", "tune_command"]
