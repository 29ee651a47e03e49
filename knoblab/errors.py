"""The one exception type a user sees as a single line (exit code 2), and the stop flag."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

# Set by the first signal that stops a run. The signal also raises KeyboardInterrupt, but
# Python drops an exception raised while it runs a finaliser ("Exception ignored in ...");
# the command line raises it again shortly after, and the run loop checks this flag between
# measurements, so a stop is never lost.
STOP = threading.Event()
# Set once the stop's KeyboardInterrupt is on its way up, so that no second one breaks off
# the clean-up it runs through.
UNWINDING = threading.Event()


def stop_here() -> NoReturn:
    """Raise the stop (KeyboardInterrupt) that STOP asks for, and mark it on its way."""
    UNWINDING.set()
    raise KeyboardInterrupt


@contextmanager
def shielded() -> Iterator[None]:
    """While settings are put back a stopping signal does not break in (it only hurries, as a
    second one does anywhere): a restore cut short would leave the server changed."""
    stopping = STOP.is_set()
    STOP.set()
    try:
        yield
    finally:
        if not stopping:
            STOP.clear()


class UserError(Exception):
    """Bad input or an environment problem the user can fix; the message says what and how."""


class BudgetTooShort(UserError):
    """A time budget that cannot hold the rounds a run needs (knoblab.runner): a search skips
    the check it was for, where any other refusal stops it. `needed`: seconds it would take."""

    def __init__(self, message: str, needed: float = 0.0) -> None:
        super().__init__(message)
        self.needed = needed


class RunBusy(UserError):
    """A run another live process is measuring (knoblab.store's claim on it)."""
