"""How knoblab stops: the first stopping signal (Ctrl-C, a closed terminal's HUP, a service
manager's TERM, Ctrl-\\) stops the command where it is, so that servers are stopped and settings
put back; later ones only make that clean-up hurry; once the command has its exit code, signals
are absorbed."""

from __future__ import annotations

import atexit
import signal
import sys

from knoblab.errors import STOP, UNWINDING, stop_here

STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def handle_stopping_signals() -> None:
    STOP.clear()
    UNWINDING.clear()
    _SIGNALLED.update(stopping=False, ended=False, taken=False)
    for signum in STOPPING_SIGNALS:
        signal.signal(signum, _interrupt)
    signal.signal(signal.SIGALRM, _interrupt_again)
    sys.unraisablehook = _unraisable


def _interrupt(signum: int, frame: object) -> None:
    """The first signal stops the run where it is; later ones only make the clean-up hurry
    (servers are killed instead of shut down), so that a second Ctrl-C cannot break off the
    clean-up itself and leave a server, its directory or a changed setting behind. Once the
    command has its exit code, signals are absorbed.

    A handler may run inside itself (a signal on the heels of another), so it decides on
    plain flags, never on a lock: setting an Event takes one, and the handler that
    interrupted the setting would wait for it forever."""
    if _SIGNALLED["ended"]:
        return
    if _SIGNALLED["stopping"] or STOP.is_set():
        # No server was started without that module; a signal while it is being imported
        # finds it without its functions yet.
        hurry = getattr(sys.modules.get("knoblab.server.sandbox"), "hurry", None)
        if hurry is not None:
            hurry()
        return
    _SIGNALLED["stopping"] = True
    STOP.set()
    stop_here()


# Read and written by the signal handler alone (and reset when main() starts).
_SIGNALLED = {"stopping": False, "ended": False, "taken": False}


def ignore_stopping_signals() -> None:
    """At exit, before Python gives the signals back to their defaults (where a late TERM
    would kill the process and turn a clean stop into "killed"): ignored ones stay ignored."""
    signal.setitimer(signal.ITIMER_REAL, 0)
    for signum in STOPPING_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def _unraisable(unraisable: sys.UnraisableHookArgs) -> None:
    """A stop that landed in a finaliser, where Python drops exceptions: say nothing and raise
    it again in a moment, outside the finaliser, rather than wait for the measurement to end."""
    if issubclass(unraisable.exc_type, KeyboardInterrupt) and STOP.is_set():
        UNWINDING.clear()
        signal.setitimer(signal.ITIMER_REAL, 0.01)
        return
    sys.__unraisablehook__(unraisable)


def _interrupt_again(signum: int, frame: object) -> None:
    if STOP.is_set() and not UNWINDING.is_set() and not _SIGNALLED["taken"]:
        stop_here()


def taken() -> None:
    """The command has caught the stop and is ending on it: a stop dropped in a finaliser
    (`_unraisable`) is not raised again, where it would escape the command's own handler."""
    _SIGNALLED["taken"] = True
    signal.setitimer(signal.ITIMER_REAL, 0)


def rearm() -> None:
    """After a first signal was taken to end a capture's window: the next one stops the
    command again (the settings it could have cut short are back by then)."""
    STOP.clear()
    UNWINDING.clear()
    _SIGNALLED["stopping"] = False
    _SIGNALLED["taken"] = False


def ended() -> None:
    """The command has its one exit code: a stopping signal from now until the process is
    gone changes nothing (see _interrupt), also after Python drops its handlers."""
    _SIGNALLED["ended"] = True
    taken()
    # CPython 3.11 remembers a KeyboardInterrupt raised inside exec() of a string (as a
    # dataclass's generated methods are made), even one caught since, and at the exit of
    # `python -m knoblab.cli` kills the process with SIGINT whatever its exit code: a stop
    # landing there turned "interrupted, exit 130" into "killed". Running a string clears it.
    exec("")
    atexit.unregister(ignore_stopping_signals)  # once, however often a command runs
    atexit.register(ignore_stopping_signals)
