"""What `dagster-ir update`, `demo` and `reproduce` print while they work: one line per run.

In a terminal a run's line starts when the run starts and ends with its duration:

    [ 7/42] 09:01:02  wiki_links ... 3.2 s

Elsewhere (a log file, CI), where a half line would sit unflushed, every line is whole and
timestamped, one when a run starts and one when it ends:

    2026-12-03T09:01:02Z [ 7/42] start wiki_links
    2026-12-03T09:01:05Z [ 7/42] done  wiki_links in 3.2 s

N counts asset partitions done so far (with the run's own), M those that were missing or stale when
the update began (plus any found later).
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Callable
from datetime import UTC, datetime, timedelta


def _what(names: list[str], partition: str | None) -> str:
    return ", ".join(names) + (f" [{partition}]" if partition else "")


def format_seconds(seconds: float) -> str:
    """`0.4 s`, `12 s`, `3 min 05 s`, `1 h 02 min`."""
    if seconds < 9.95:
        return f"{seconds:.1f} s"
    if seconds < 59.5:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class Progress:
    """Counts asset partitions and prints a run's start and end (see the module docstring)."""

    def __init__(
        self,
        log: Callable[[str], None] | None = None,
        *,
        tty: bool | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        quiet: bool = False,
    ) -> None:
        # quiet: count and time, print only notes (a worker process: its parent prints the run lines)
        self.quiet = quiet
        self.tty = sys.stdout.isatty() if tty is None and log is None else bool(tty)
        self._log = log or (lambda line: print(line, flush=True))
        self._clock = clock
        self.total = 0
        self.done = 0
        self._open = False  # a terminal line is waiting for its duration
        self.timings: list[tuple[str | None, list[str], datetime, float, bool]] = []  # (partition, names, start, s, ok)

    def expect(self, pending: int) -> None:
        """`pending` asset partitions are still to do: M grows if that is more than first thought."""
        self.total = max(self.total, self.done + pending)

    def _count(self, n: int) -> str:
        width = len(str(self.total))
        return f"[{self.done + n:>{width}}/{self.total}]"

    def start(self, names: list[str], partition: str | None) -> datetime:
        now = self._clock()
        count = self._count(len(names))
        if self.quiet:
            return now
        if self.tty:
            sys.stdout.write(f"{count} {now.astimezone():%H:%M:%S}  {_what(names, partition)} ...")
            sys.stdout.flush()
            self._open = True
        else:
            self._log(f"{now:%Y-%m-%dT%H:%M:%SZ} {count} start {_what(names, partition)}")
        return now

    def end(self, names: list[str], partition: str | None, started: datetime, *, ok: bool = True) -> None:
        seconds = (self._clock() - started).total_seconds()
        self.finished(names, partition, started, seconds, ok=ok)

    def finished(
        self, names: list[str], partition: str | None, started: datetime, seconds: float, *, ok: bool = True
    ) -> None:
        """A run of `names` that started at `started` took `seconds` (ended here, or in a worker process)."""
        count = self._count(len(names))
        self.timings.append((partition, list(names), started, seconds, ok))
        if self.quiet:
            self.done += len(names)
            return
        outcome = format_seconds(seconds) if ok else f"FAILED after {format_seconds(seconds)}"
        if self.tty and self._open:
            print(f" {outcome}", flush=True)
        elif self.tty:
            print(f"{count} {started.astimezone():%H:%M:%S}  {_what(names, partition)} ... {outcome}", flush=True)
        else:
            word = "done " if ok else "FAILED"
            ended = started + timedelta(seconds=seconds)
            self._log(
                f"{ended:%Y-%m-%dT%H:%M:%SZ} {count} {word} {_what(names, partition)} in {format_seconds(seconds)}"
            )
        self._open = False
        self.done += len(names)

    def note(self, line: str) -> None:
        """Any other line (a failure's message, a warning): never glued to an open run line."""
        if self._open:
            print(flush=True)
            self._open = False
        self._log(line)


_SITE_PACKAGES = re.compile(r"\S*?/(?:site|dist)-packages/")


def short_paths(text: str) -> str:
    """`text` with installed packages' paths cut to the package (`.../site-packages/pkg/x` -> `pkg/x`)
    and the home directory written `~`."""
    text = _SITE_PACKAGES.sub("", text)
    home = os.path.expanduser("~")
    return text.replace(home + os.sep, "~" + os.sep) if home not in ("", os.sep) else text


class WarningPrinter:
    """`warnings.showwarning` for the command line: each distinct warning once, on one line,
    `warning: <message> (<Category>)`, with no source line and no site-packages paths."""

    def __init__(self, stream=None) -> None:
        self.stream = stream
        self.seen: set[str] = set()

    def __call__(self, message, category, filename, lineno, file=None, line=None) -> None:
        text = short_paths(str(message).strip().splitlines()[0] if str(message).strip() else category.__name__)
        if text in self.seen:
            return
        self.seen.add(text)
        stream = file or self.stream or sys.stderr
        try:
            stream.write(f"warning: {text} ({category.__name__})\n")
            stream.flush()
        except (OSError, ValueError):  # a closed stream: the warning is not worth a crash
            pass


def install_warning_printer() -> WarningPrinter:
    """Print every later warning through a `WarningPrinter` (each distinct one once per process)."""
    printer = WarningPrinter()
    warnings.showwarning = printer
    return printer
