"""The terminal: consoles that show every string literally, on standard streams that a closed
pipe or a full disk cannot break.

Whatever knoblab prints may hold text that did not come from its own code (names, SQL, paths,
values, the server's messages). The consoles never read it as markup or emoji codes, and every
string they render passes through knoblab.literal (no escape sequence reaches the terminal).
Rich Text objects are not strings: whoever builds one from such text passes it through
`literal` first (knoblab.report.tables does).

A standard stream that cannot be written any more (`knoblab runs | head -1`, `> /dev/full`,
a closed descriptor) stops being written to instead of stopping knoblab in the middle of what
it does: a report folder is still written, a measurement still stored. The command then ends
with one line saying what could not be shown (`Stream.check`), or quietly when the reader
merely stopped reading (a closed pipe).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
import time
from typing import IO, Any, cast

from rich.console import Console
from rich.progress import Task, TimeRemainingColumn
from rich.text import Text

from knoblab.errors import UserError
from knoblab.literal import literal


class Stream(io.TextIOBase):
    """sys.stdout or sys.stderr (looked up at each write, so that a replaced stream is used),
    written until the first failure and never after it."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.stream_name = name
        self.failed: OSError | None = None

    def _stream(self) -> Any:
        stream = getattr(sys, self.stream_name)
        if stream is None:  # started with the descriptor closed (>&-)
            raise OSError(errno.EBADF, "the stream is closed")
        # While a progress bar shows, rich stands in for sys.stdout and sys.stderr (to print
        # above the bar); it writes through the stream it replaced, and so do we.
        return getattr(stream, "rich_proxied_file", stream)

    def write(self, text: str) -> int:
        if self.failed is None:
            try:
                self._stream().write(text)
            except (OSError, ValueError) as exc:
                self._fail(exc)
        return len(text)

    def flush(self) -> None:
        if self.failed is None:
            try:
                self._stream().flush()
            except (OSError, ValueError) as exc:
                self._fail(exc)

    def isatty(self) -> bool:
        try:
            return bool(self._stream().isatty())
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        return int(self._stream().fileno())

    @property
    def encoding(self) -> str:  # type: ignore[override]
        try:
            return str(getattr(self._stream(), "encoding", None) or "utf-8")
        except OSError:
            return "utf-8"

    def _fail(self, exc: OSError | ValueError) -> None:
        self.failed = exc if isinstance(exc, OSError) else OSError(errno.EBADF, str(exc))
        # What is buffered can never be written: the descriptor goes to /dev/null, so that
        # Python's own last flush at exit neither fails nor prints a complaint.
        with contextlib.suppress(Exception):
            fd = self._stream().fileno()
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, fd)
            os.close(null)

    def check(self, kept: str = "") -> None:
        """One line (a UserError) when what was printed could not all be written; nothing
        when the reader closed the pipe (`| head`: it had what it wanted). `kept`: what the
        command did all the same, e.g. "the report is in DIR"."""
        failed = self.failed
        if failed is None or failed.errno == errno.EPIPE:
            return
        why = failed.strerror or str(failed)
        name = {"stdout": "standard output", "stderr": "standard error"}[self.stream_name]
        raise UserError(f"cannot write to {name} ({why})" + (f"; {kept}" if kept else ""))


class Terminal(Console):
    """A console that shows text as it is: no markup, no emoji codes, no highlighting, and
    control characters in any string it renders made visible (knoblab.literal)."""

    def __init__(self, stream: Stream, **kwargs: Any) -> None:
        super().__init__(file=cast("IO[str]", stream), markup=False, emoji=False,
                         highlight=False, **kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(literal(text, lines=True), **kwargs)

    def check(self, kept: str = "") -> None:
        """See Stream.check."""
        if isinstance(self.file, Stream):
            self.file.check(kept)


class BudgetedTimeRemaining(TimeRemainingColumn):
    """A progress bar's ETA that never reaches past its budget: rich's estimate (from the
    pace so far and what is left to do), at most the time until the task's `deadline` field
    (a time.monotonic() instant, when its budget runs out), since the work ends by then
    whatever is left of it. Without a deadline, rich's estimate as it is."""

    def render(self, task: Task) -> Text:
        deadline = task.fields.get("deadline")
        if deadline is None or task.total is None or task.finished:
            return super().render(task)
        left = max(0.0, float(deadline) - time.monotonic())
        estimate = task.time_remaining
        seconds = int(left if estimate is None else min(float(estimate), left))
        minutes, seconds = divmod(seconds, 60)
        hours, minutes = divmod(minutes, 60)
        return Text(f"{hours:d}:{minutes:02d}:{seconds:02d}", style="progress.remaining")


def deadline(budget_left: float | None) -> float | None:
    """The time.monotonic() instant a budget with `budget_left` seconds left runs out (for
    BudgetedTimeRemaining); None without a budget."""
    return None if budget_left is None else time.monotonic() + max(0.0, budget_left)


def stdout() -> Terminal:
    """A console on standard output; once the command has printed, `.file.check()` says
    whether it could."""
    stream = Stream("stdout")
    # Reports are read in terminals and in logs: never squeeze tables to 80 columns in a pipe.
    return Terminal(stream, width=None if stream.isatty() else 160)


def stderr() -> Terminal:
    """A console on standard error: progress and messages, dropped once it cannot be
    written (the run goes on; its exit code still tells)."""
    return Terminal(Stream("stderr"))
