"""The watch of a wsjob on the user node: what `python run.py CSX` prints while its job runs.

`follow` reads the server's events for one job (system/appliance/client.py's watch: phases, the
job's log lines, heartbeats, and this side's own `silent` / `answered` when the server misses
heartbeats or speaks again) and prints, through the one table runtime/cli/appliance_lines.py:
the queue's note (again every QUEUE_NOTE_BEATS heartbeats while it waits, as the real client
polls), the staging lines when the job's log shows each step, the training steps with Rate and
GlobalRate measured here, the checkpoint lines. The job's own WARNING and ERROR lines are
forwarded as it logged them, once each; a failed job's own error sentence becomes the client's
last line (`failed`).
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from cs2sim.runtime.cli.appliance_eval import EvalLines
from cs2sim.runtime.cli.appliance_lines import LINES, render
from cs2sim.system.errors import CsError

__all__ = ["Out", "Training", "follow", "failed", "EXIT_TIME_LIMIT", "EXIT_SYSTEM_STOPPED"]

EXIT_TIME_LIMIT = 124  # as timeout(1)
EXIT_SYSTEM_STOPPED = 75
TRAIN_RE = re.compile(r"\| Train Device=[^,]*, Step=(\d+), Loss=([^,\s]+)")
FINISHED_RE = re.compile(r"Training finished with (\d+) samples")
STAMP_RE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")
LEVEL_RE = re.compile(r"^\S+ \S+ (WARNING|ERROR):\s+(.+)$")  # a job's line to forward
QUEUE_NOTE_BEATS = 12  # a waiting job's queue note is said again this often (60 s at 5 s)
ERROR_RE = re.compile(r"^(?:\S+ \S+ [A-Z]+:\s+)?error: (.+)$")  # the run's, not srun's
log = logging.getLogger("cs2sim.run")


class Out:
    """Prints the table's lines, never one before a line above it (checked; lines of one loop
    may alternate), and forwards the job's own WARNING and ERROR lines as they come."""

    def __init__(self) -> None:
        self.last = -1
        self.keys = [line.key for line in LINES]

    def fits(self, key: str) -> bool:
        """Whether `key` may be printed now (not above the last line printed, unless both are
        of one loop; a line said once is not said again)."""
        i = self.keys.index(key)
        same_loop = self.last >= 0 and LINES[i].loop and LINES[i].loop == LINES[self.last].loop
        return bool(same_loop) or i > self.last or (i == self.last and LINES[i].repeat)

    def say(self, key: str, **values: Any) -> None:
        i = self.keys.index(key)
        same_loop = self.last >= 0 and LINES[i].loop and LINES[i].loop == LINES[self.last].loop
        if not self.fits(key):
            raise AssertionError(f"line {key!r} out of order")
        self.last = max(i, self.last) if same_loop else i
        log.info(render(key, **values))

    @staticmethod
    def forward(level: str, text: str) -> None:
        """A line the job logged at WARNING or ERROR, on this terminal at the same level."""
        log.log(logging.ERROR if level == "ERROR" else logging.WARNING, text)

    @staticmethod
    def server(text: str, *, warning: bool) -> None:
        """What this client has to say about the server itself (frozen, answering again)."""
        log.log(logging.WARNING if warning else logging.INFO, text)


def _logged_at(text: str) -> float | None:
    """The time a job's log line carries (`YYYY-MM-DD HH:MM:SS,mmm`, local time), or None."""
    m = STAMP_RE.match(text)
    if m is None:
        return None
    try:
        return time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1e3
    except (ValueError, OverflowError):
        return None


class Training:
    """The execute job's lines, in the table's order, with Rate / GlobalRate measured here."""

    def __init__(self, out: Out, batch: int, log_steps: int, num_csx: int, mode: str) -> None:
        from cs2sim.runtime.training.metrics import RateTracker

        self.out, self.batch, self.log_steps, self.num_csx = out, batch, log_steps, num_csx
        self.mode = mode
        self.tracker = RateTracker()
        self.keys = [line.key for line in LINES]
        first, last = self.keys.index("ingress_ready"), self.keys.index("beginning")
        self.staging = [line for line in LINES[first : last + 1] if not line.optional]
        # lines printed only when the job's log says so: a checkpoint loaded, saved
        self.optional = [line for line in LINES if line.optional and line.after]
        self.printed = 0  # how many staging lines are out
        self.step: int | None = None
        self.began = 0.0
        self.samples: int | None = None
        begin = lambda: self._through("beginning")  # noqa: E731
        self.eval = EvalLines(out.say, self.tracker, batch, begin) if mode == "eval" else None

    def running(self) -> None:
        self._through("weights")

    def _through(self, key: str, at: float | None = None) -> None:
        """Print the staging lines up to `key`; `at`: when the job logged the event that lets
        them be printed (None: now)."""
        while self.printed < len(self.staging):
            line = self.staging[self.printed]
            self.printed += 1
            self.out.say(line.key, **({"n": self.num_csx} if line.key == "preparing" else {}))
            if line.key == "programming_done":
                # the executable is loaded: count from the moment the job says it was, so the
                # rates are samples received here over time since then (a log line can reach
                # this node in the same read as the first step's)
                now = time.time()
                self.tracker.reset(min(at, now) if at is not None else now)
                self.began = time.monotonic() - (now - self.tracker.start_time)
            if line.key == key:
                return

    def _optional(self, text: str) -> bool:
        """Print the optional line `text` is the event of, if any (after the staging lines
        above it)."""
        for line in self.optional:
            m = re.search(line.after or "", text)
            if m is None:
                continue
            at = self.keys.index(line.key)
            if not self.out.fits(line.key):
                return True  # a replica's copy, or the event came after its place: said once
            above = [k.key for k in self.staging if self.keys.index(k.key) < at]
            done = {k.key for k in self.staging[: self.printed]}
            if above and above[-1] not in done:
                self._through(above[-1], _logged_at(text))
            self.out.say(line.key, **m.groupdict())
            return True
        return False

    def line(self, text: str) -> None:
        if self.eval is not None and self.eval.line(text):
            return
        m = TRAIN_RE.search(text)
        if m is None and self._optional(text):
            return
        if m is None:
            for idx in range(self.printed, len(self.staging)):
                after = self.staging[idx].after
                if after and re.search(after, text):
                    end = idx + 1  # the group: up to the next line that waits for an event
                    while end < len(self.staging) and not self.staging[end].after:
                        end += 1
                    self._through(self.staging[end - 1].key, _logged_at(text))
                    break
            f = FINISHED_RE.search(text)
            if f:
                self.samples = int(f.group(1))
            return
        self._through("beginning")
        step = int(m.group(1))
        done = step - self.step if self.step is not None else min(step, self.log_steps)
        self.step = step
        self.tracker.add(max(0, done) * self.batch)
        now = time.time()
        from cs2sim.runtime.training.metrics import format_rate

        self.out.say(
            "train",
            step=step,
            loss=m.group(2),
            rate=format_rate(self.tracker.rate(now)),
            global_rate=format_rate(self.tracker.global_rate(now)),
        )

    def succeeded(self) -> None:
        self._through("beginning")
        if self.eval is not None:
            self.eval.succeeded()
            return
        self.out.say("completed")
        seconds = time.monotonic() - self.began
        samples = self.samples if self.samples is not None else int(self.tracker.total_count)
        self.out.say("processed", samples=samples, seconds=seconds)


def follow(conn: Any, name: str, out: Out, kind: str, training: Training | None) -> dict[str, Any]:
    """Watch a job to its end, printing what the table says when it happens, the job's own
    WARNING and ERROR lines as they come, the queue's note again every QUEUE_NOTE_BEATS
    heartbeats while it waits, and what this client sees of the server (frozen, answering)."""
    waited, running, beats = False, False, 0
    note = ""
    said: list[str] = []  # the job's own error sentences, first first
    forwarded: set[str] = set()
    phase = "QUEUED"
    try:
        for event in conn.watch(name, attach=True):
            kind_of = event["event"]
            if kind_of in ("phase", "end"):
                job = event["job"]
                phase, new_note = job["status"]["phase"], event.get("note", "")
                if phase == "QUEUED" and new_note and new_note != note:
                    waited, beats = True, 0
                    out.say(f"{kind}_queued", note=new_note)
                note = new_note
                if phase == "RUNNING" and not running:
                    running = True
                    if waited:
                        out.say(f"{kind}_scheduled")
                    if kind == "compile":
                        out.say("compile_ingress")
                    if training is not None:
                        training.running()
                if kind_of == "end":
                    if training is not None and phase == "SUCCEEDED":
                        training.succeeded()
                    if said:  # the first: what went wrong, not what followed from it
                        job["status"]["said"] = said[0]
                    return dict(job)
            elif kind_of == "heartbeat":
                beats += 1
                if phase == "QUEUED" and note and beats % QUEUE_NOTE_BEATS == 0:
                    out.say(f"{kind}_queued", note=note)  # the real client polls and says so
            elif kind_of == "silent":
                out.server(frozen(name, phase, event), warning=True)
            elif kind_of == "answered":
                out.server(
                    f"The cluster management server answers again (silent for "
                    f"{event['seconds']:.0f} s); still watching {name}.",
                    warning=False,
                )
            elif kind_of == "lines":
                for line in event["text"].splitlines():
                    m = ERROR_RE.search(line)
                    if m:  # the run's own one-line error, if it fails
                        said.append(m.group(1))
                    level = LEVEL_RE.match(line)
                    text = level.group(2) if level else line if m else ""
                    if text and text not in forwarded:
                        forwarded.add(text)  # once: several tasks may log it
                        out.forward(level.group(1) if level else "ERROR", text)
                        if level and level.group(1) == "ERROR" and not m:
                            said.append(text)
                    if training is not None:
                        training.line(line)
    finally:
        conn.close()
    raise AssertionError("a watch ends with an end event")


def frozen(name: str, phase: str, event: dict[str, Any]) -> str:
    """One sentence: the server is silent but its connection is open (stopped or overloaded)."""
    pid = event.get("pid") or 0
    how = (
        f"its process {pid} is stopped (resume it with `kill -CONT {pid}`)"
        if event.get("stopped")
        else "it may be stopped or overloaded (check it with `cs-cluster-server status`)"
    )
    return (
        f"The cluster management server has not answered for {event['seconds']:.1f} s "
        f"({event['missed']} heartbeats of {event['period']:g} s missed) though its "
        f"connection is open: {how}; {name} is still {phase} as it last said and keeps its "
        "state, and this client waits for the server (Ctrl-C cancels the job)."
    )


def failed(job: dict[str, Any]) -> int:
    status = job["status"]
    name = job["meta"]["name"]
    reason = status.get("reason") or "see its log"
    code = status.get("exitCode")
    said = status.get("said")
    # the job's own sentence (a data error, a refusal) says what failed and what to do; the
    # launch's exit code says neither
    message = (
        f"{name} {status['phase']}: {said.rstrip('.')} (`csctl log-export {name}` zips its logs)."
        if said and status["phase"] == "FAILED" and reason.endswith("(see its log)")
        else f"{name} {status['phase']}: {reason}; its logs are in {status['logPath']} "
        f"(`csctl log-export {name}` zips them)."
    )
    raise JobEnded(
        message,
        EXIT_SYSTEM_STOPPED
        if code == EXIT_SYSTEM_STOPPED
        else EXIT_TIME_LIMIT
        if "time limit" in reason
        else 130
        if status["phase"] == "CANCELLED" and "went away" in reason
        else 1,
    )


class JobEnded(CsError):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.exit_code = code
