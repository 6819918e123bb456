"""The bottom toolbar: system, state, active/configured mode, running jobs, who you are.

    cs2-1 │ STANDBY │ mode: PIPELINED → WEIGHT_STREAMING at activate │ jobs: 0 │ root (admin)

It is read from the store on every render (one `Machine.status()`: a few indexed SELECTs), so a
change made by another shell or a launcher shows up at the next keypress or refresh tick.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

from cs2sim.csshell.terminal import visible
from cs2sim.system.state import State

if TYPE_CHECKING:
    from prompt_toolkit.formatted_text import StyleAndTextTuples

    from cs2sim.csshell.context import Context

__all__ = ["Toolbar", "STYLE"]

STATE_CLASS = {
    State.ACTIVE: "class:state.active",
    State.STANDBY: "class:state.standby",
    State.ACTIVATING: "class:state.activating",
    State.FAULT: "class:state.fault",
}

STYLE = {
    "bottom-toolbar": "noreverse bg:#303030 #d0d0d0",
    "state.active": "bold #5fd75f",
    "state.standby": "bold #ffd75f",
    "state.activating": "bold #5fd7ff",
    "state.fault": "bold #ff5f5f",
    "pending": "#ffd75f",
}

Fragments: TypeAlias = "StyleAndTextTuples"  # [(style, text), ...] as prompt_toolkit takes them


SHORT_MODE = {"PIPELINED": "PL", "WEIGHT_STREAMING": "WS"}


class Toolbar:
    """Callable that prompt_toolkit calls on every render.

    On a narrow terminal the same facts are said in fewer columns (`mode:` and `at activate`
    dropped, then the modes as PL/WS), so the toolbar is never cut at 60 columns."""

    def __init__(self, ctx: Context, columns: Callable[[], int] | None = None) -> None:
        self.ctx = ctx
        self.columns = columns or _app_columns

    def __call__(self) -> Fragments:
        ctx = self.ctx
        try:
            status = ctx.machine.status()
        except Exception as e:  # noqa: BLE001 - never break the prompt for a toolbar
            return [("", f" status unavailable: {visible(' '.join(str(e).split()))[:80]} ")]
        state = str(status.state)
        left = status.ready_in()
        if left is not None:  # ACTIVATING: the reboot's time left
            state += f" ({left:.0f} s)"
        who = ctx.identity
        jobs = len(status.running_jobs)
        width = self.columns()
        for level in range(3):
            short = (lambda m: SHORT_MODE[str(m)]) if level == 2 else str
            fragments: Fragments = [
                ("", f" {visible(status.name)} │ "),
                (STATE_CLASS[status.state], state),
                ("", (" │ mode: " if level == 0 else " │ ") + short(status.active_mode)),
            ]
            if status.pending_mode_change:  # a change waits for the next activation
                at = " at activate" if level == 0 else ""
                fragments.append(("class:pending", f" → {short(status.configured_mode)}{at}"))
            if level == 0:
                fragments.append(("", f" │ jobs: {jobs} │ {visible(who.name)} ({who.role}) "))
            else:
                fragments.append(("", f" │ jobs {jobs} │ {visible(who.name)} "))
            if sum(len(f[1]) for f in fragments) <= width:
                break
        return fragments


def _app_columns() -> int:
    """The width of the running prompt_toolkit application's terminal (80 if unknown)."""
    try:
        from prompt_toolkit.application import get_app

        return get_app().output.get_size().columns
    except Exception:  # noqa: BLE001 - no application: assume a classic terminal
        return 80
