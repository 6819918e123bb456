"""Console and file output of a run.py: THE one printing module of runtime/.

Only the run.py entry points (runtime/cli/main.py `main`) use it; everything else in runtime/
logs to the `cs2sim` loggers and never prints. It sets up:

* console logging in Model Zoo's format ``%(asctime)s %(levelname)s:   %(message)s`` on stdout;
* the run log file ``<model_dir>/run_%Y%m%d_%H%M%S.log`` (same format);
* a rich progress bar with ETA on stderr when stdout and stderr are both a terminal, the log
  lines scrolling above it; plain log lines otherwise (with `| tee` or `| less` the lines come
  back to the terminal through the pipe and would collide with a bar drawn there); after a
  resume the bar starts at the restored step, so the step count and ETA continue;
* `error()` / `write()` for the CLI's one error line and its help text.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from cs2sim.runtime.artifacts.atomic import open_append

if TYPE_CHECKING:  # rich is imported when a bar is shown
    from rich.console import Console
    from rich.progress import Progress, TaskID

    from cs2sim.runtime.executors.base import StepOutput
    from cs2sim.runtime.training.callbacks import LoadInfo

__all__ = ["FORMAT", "RunLog"]

FORMAT = "%(asctime)s %(levelname)s:   %(message)s"
LOGGER = "cs2sim"


class _ConsoleHandler(logging.Handler):
    """Writes records to a stream, or above the progress bar while one is shown."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream
        self.live_console: Console | None = None  # while the bar is on screen

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = self.format(record)
            if self.live_console is not None:
                self.live_console.print(msg, markup=False, highlight=False, soft_wrap=True)
            else:
                self.stream.write(msg + "\n")
                self.stream.flush()
        except Exception:  # noqa: BLE001 - logging must never break the run
            self.handleError(record)


class _Progress:
    """A rich progress bar over global steps, fed by trainer callbacks."""

    def __init__(self, stream: TextIO, handler: _ConsoleHandler) -> None:
        self.stream, self.handler = stream, handler
        self.bar: Progress | None = None
        self.task: TaskID | None = None

    def on_load(self, info: LoadInfo) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("steps"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=Console(file=self.stream),
            redirect_stdout=False,
            redirect_stderr=False,
            transient=False,
        )
        # the step count starts at the restored step; the ETA uses this run's speed only
        self.task = self.bar.add_task(
            f"{info.mode} ({info.device})", total=info.stop_step, completed=info.start_step
        )
        self.bar.start()
        self.handler.live_console = self.bar.console  # log lines print above the bar

    def on_step(self, out: StepOutput) -> None:
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, completed=out.step)

    def stop(self, *_: Any) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
        self.handler.live_console = None


class _LogFile(logging.StreamHandler[Any]):
    """The run log's handler: a stream the run opened itself (runtime/artifacts/atomic.py's
    open_append), closed with the handler."""

    def close(self) -> None:
        try:
            self.flush()
            self.stream.close()
        finally:
            super().close()


class RunLog:
    """Logging, the run log file and the progress bar of one run.py invocation."""

    def __init__(
        self, out: TextIO | None = None, err: TextIO | None = None, level: int = logging.INFO
    ) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        # set once a training run starts: what running the same command again would do
        self.resume_text: Callable[[], str] | None = None
        self.logger = logging.getLogger(LOGGER)
        self._old_level = self.logger.level
        self.logger.setLevel(level)
        self.console = _ConsoleHandler(self.out)
        self.console.setFormatter(logging.Formatter(FORMAT))
        self.logger.addHandler(self.console)
        self.file_handler: _LogFile | None = None
        self.log_path: Path | None = None
        self.progress: _Progress | None = None

    def add_file(self, model_dir: Path) -> Path:
        """Also log to <model_dir>/run_%Y%m%d_%H%M%S.log; returns its path."""
        model_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = model_dir / time.strftime("run_%Y%m%d_%H%M%S.log")
        # opened without following a symlink; a FIFO or another's file there is refused
        fd = open_append(self.log_path)
        self.file_handler = _LogFile(os.fdopen(fd, "a", encoding="utf-8"))
        self.file_handler.setFormatter(logging.Formatter(FORMAT))
        self.logger.addHandler(self.file_handler)
        return self.log_path

    def attach(self, trainer: Any) -> None:
        """Show a progress bar for the trainer's run when stdout and stderr are terminals."""
        if not (_isatty(self.err) and _isatty(self.out)):
            return
        self.progress = _Progress(self.err, self.console)
        trainer.add_callback("on_load", self.progress.on_load)
        trainer.add_callback("on_step", self.progress.on_step)
        trainer.add_callback("on_end", self.progress.stop)

    def error(self, message: str) -> None:
        """Print the run's one error line on stderr (and into the run log)."""
        self._stop_progress()
        if self.file_handler is not None:
            self.file_handler.emit(
                logging.makeLogRecord(
                    {"name": LOGGER, "levelno": logging.ERROR, "levelname": "ERROR", "msg": message}
                )
            )
        self.err.write(message + "\n")
        self.err.flush()

    def write(self, text: str) -> None:
        """Print text (help, usage) on stdout."""
        self.out.write(text)
        self.out.flush()

    def _stop_progress(self) -> None:
        if self.progress is not None:
            self.progress.stop()

    def close(self) -> None:
        """Stop the bar, detach and close the handlers."""
        self._stop_progress()
        self.logger.removeHandler(self.console)
        if self.file_handler is not None:
            self.logger.removeHandler(self.file_handler)
            self.file_handler.close()
        self.logger.setLevel(self._old_level)

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
