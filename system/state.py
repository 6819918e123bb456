"""The system's state machine: every state change rule lives in this file; everything else asks it.

States (the Weight Streaming Quickstart, Section 1, names STANDBY; the rest is our design, see
docs/sources.md):

    ACTIVE --standby--> STANDBY --activate--> ACTIVATING --booted (time)--> ACTIVE
                        STANDBY --execmode setup | execmode withdraw--> STANDBY
    ACTIVE | STANDBY | ACTIVATING --fault--> FAULT --standby--> STANDBY

* ACTIVATING is the reboot. It is stored with its end time and becomes ACTIVE for whoever reads
  it after that time (system/machine.py resolves it and audits it as ``booted`` by ``system``),
  so no daemon is needed and a killed shell cannot leave the machine half-booted.
* ``execmode setup`` only records the *configured* mode; the *active* mode changes only when a
  reboot completes (``booted``), into the configured mode. ``execmode withdraw`` takes a pending
  change back (configured := active).
* Anything not in TRANSITIONS is refused with InvalidTransition whose message names the current
  state and the command that helps (REFUSALS).
* Every other refusal rule is stated here too, below the table: by role, by what a system holds
  (running jobs, a pending mode change, the mode an activation expects), and a job's (its
  systems' state and mode, another job holding one of them). system/machine.py only applies
  them, in one transaction, and audits the outcome.
"""

from __future__ import annotations

import enum
import math
import time
from typing import Protocol

from cs2sim.system.errors import (
    CsError,
    InvalidTransition,
    JobRefused,
    PermissionDenied,
    UsageError,
)
from cs2sim.system.store_ops import wire

__all__ = [
    "State",
    "ExecMode",
    "Action",
    "TRANSITIONS",
    "REFUSALS",
    "ADMIN_ACTIONS",
    "INTERNAL_ACTIONS",
    "next_state",
    "ready_text",
    "allowed_actions",
    "LAUNCHERS",
    "JOB_REFUSALS",
    "SystemRow",
    "action_refusal",
    "busy_refusal",
    "withdraw_refusal",
    "expect_refusal",
    "others_refusal",
    "job_refusal",
    "systems_refusal",
    "held_refusal",
]


@wire
class State(enum.StrEnum):
    """Where the CS-2 system is in its life cycle."""

    ACTIVE = "ACTIVE"
    STANDBY = "STANDBY"
    ACTIVATING = "ACTIVATING"
    FAULT = "FAULT"


@wire
class ExecMode(enum.StrEnum):
    """The execution mode a system is configured for / booted into (Weight Streaming Quickstart,
    Section 1, docs/sources.md)."""

    PIPELINED = "PIPELINED"
    WEIGHT_STREAMING = "WEIGHT_STREAMING"

    @property
    def label(self) -> str:
        """The menu label of the Weight Streaming Quickstart: "Pipelined" / "Weight Streaming"."""
        return _LABELS[self]

    @property
    def firmware(self) -> str:
        """The FPGA firmware this mode needs (the firmware-swap script of docs/sources.md, R1.4):
        faraday / ampere."""
        return _FIRMWARE[self]

    @classmethod
    def parse(cls, text: str) -> ExecMode:
        """Read a mode the way people type it: "ws", "weight-streaming", "Pipelined", ..."""
        key = " ".join(str(text).replace("-", " ").replace("_", " ").lower().split())
        if key in _ALIASES:
            return _ALIASES[key]
        # a unique prefix of a name is enough ("weight", "pipe")
        found = {mode for name, mode in _ALIASES.items() if key and name.startswith(key)}
        if len(found) == 1:
            return found.pop()
        choices = " or ".join(f"`{m.label.lower().replace(' ', '-')}`" for m in cls)
        raise UsageError(f"Unknown execution mode {text!r}; choose {choices}.")


_LABELS = {ExecMode.PIPELINED: "Pipelined", ExecMode.WEIGHT_STREAMING: "Weight Streaming"}
_FIRMWARE = {ExecMode.PIPELINED: "faraday", ExecMode.WEIGHT_STREAMING: "ampere"}
_ALIASES = {
    "pipelined": ExecMode.PIPELINED,
    # Cerebras' "System 101" notes: "choose pipeline/weight streaming"
    "pipeline": ExecMode.PIPELINED,
    "layer pipelined": ExecMode.PIPELINED,
    "weight streaming": ExecMode.WEIGHT_STREAMING,
    "weightstreaming": ExecMode.WEIGHT_STREAMING,
    "ws": ExecMode.WEIGHT_STREAMING,
}


@wire
class Action(enum.StrEnum):
    """What can happen to a system; the value is the command word(s) recorded in the audit log."""

    STANDBY = "standby"
    ACTIVATE = "activate"
    SETUP = "execmode setup"
    WITHDRAW = "execmode withdraw"  # configure the active mode again: no pending change
    BOOTED = "booted"  # internal: the reboot's time has passed
    FAULT = "fault"


# The single source of truth: (state, action) -> next state. Missing pairs are refused.
TRANSITIONS: dict[State, dict[Action, State]] = {
    State.ACTIVE: {
        Action.STANDBY: State.STANDBY,
        Action.FAULT: State.FAULT,
    },
    State.STANDBY: {
        Action.SETUP: State.STANDBY,
        Action.WITHDRAW: State.STANDBY,
        Action.ACTIVATE: State.ACTIVATING,
        Action.FAULT: State.FAULT,
    },
    State.ACTIVATING: {
        Action.BOOTED: State.ACTIVE,
        Action.FAULT: State.FAULT,
    },
    State.FAULT: {
        Action.STANDBY: State.STANDBY,  # standby clears the fault; then activate reboots
    },
}

# Why each missing pair is refused, and what to do instead. "{ready}" is filled with the time left
# of a reboot ("ready in 3 s"). A test checks this table covers exactly the missing pairs.
_WAIT = "The system is ACTIVATING ({ready}); wait for it to become ACTIVE."
REFUSALS: dict[tuple[State, Action], str] = {
    (State.ACTIVE, Action.ACTIVATE): (
        "The system is already ACTIVE; run `system standby` first to reboot it."
    ),
    (State.ACTIVE, Action.SETUP): (
        "Execution mode can only be changed in STANDBY; run `system standby` first."
    ),
    (State.ACTIVE, Action.WITHDRAW): (
        "The system is ACTIVE, so no mode change is pending (`system activate` applied the "
        "configured mode); nothing to withdraw."
    ),
    (State.ACTIVE, Action.BOOTED): (
        "The system is ACTIVE, not rebooting; run `system standby`, then `system activate` "
        "to reboot it."
    ),
    (State.STANDBY, Action.STANDBY): (
        "The system is already in STANDBY; run `system activate` to bring it back."
    ),
    (State.STANDBY, Action.BOOTED): (
        "The system is in STANDBY, not rebooting; run `system activate` to reboot it."
    ),
    (State.ACTIVATING, Action.STANDBY): _WAIT,
    (State.ACTIVATING, Action.ACTIVATE): _WAIT,
    (State.ACTIVATING, Action.SETUP): (
        "Execution mode can only be changed in STANDBY; the system is ACTIVATING ({ready}), "
        "wait for it to become ACTIVE, then run `system standby`."
    ),
    (State.ACTIVATING, Action.WITHDRAW): (
        "The system is ACTIVATING ({ready}) into its configured mode; a change under way cannot "
        "be withdrawn: once it is ACTIVE, run `system standby` and `config execmode setup`."
    ),
    (State.FAULT, Action.WITHDRAW): (
        "A pending mode change can only be withdrawn in STANDBY; the system is in FAULT, "
        "run `system standby` first."
    ),
    (State.FAULT, Action.ACTIVATE): (
        "The system is in FAULT; run `system standby` first to clear it, then `system activate`."
    ),
    (State.FAULT, Action.SETUP): (
        "Execution mode can only be changed in STANDBY; the system is in FAULT, "
        "run `system standby` first."
    ),
    (State.FAULT, Action.BOOTED): (
        "The system is in FAULT, not rebooting; run `system standby`, then `system activate`."
    ),
    (State.FAULT, Action.FAULT): (
        "The system is already in FAULT; run `system standby` to clear it."
    ),
}

# Who may do what: these change the machine and need the admin role. BOOTED is the clock's.
ADMIN_ACTIONS: frozenset[Action] = frozenset(
    {Action.STANDBY, Action.ACTIVATE, Action.SETUP, Action.WITHDRAW, Action.FAULT}
)
INTERNAL_ACTIONS: frozenset[Action] = frozenset({Action.BOOTED})


def ready_text(ready_in: float | None) -> str:
    """Describe the time left of a reboot: "ready in 3 s"."""
    if ready_in is None:
        return "ready shortly"
    return f"ready in {max(0, math.ceil(ready_in))} s"  # round up: never promise too early


def next_state(state: State, action: Action, *, ready_in: float | None = None) -> State:
    """The state `action` leads to from `state`; InvalidTransition (naming the fix) if none."""
    try:
        return TRANSITIONS[state][action]
    except KeyError:
        message = REFUSALS.get((state, action))
        if message is None:  # unreachable while the REFUSALS test passes; still one sentence
            allowed = ", ".join(f"`{a.value}`" for a in allowed_actions(state)) or "nothing"
            message = f"`{action.value}` is not possible in {state.value}; allowed: {allowed}."
        raise InvalidTransition(message.format(ready=ready_text(ready_in))) from None


def allowed_actions(state: State) -> list[Action]:
    """The actions TRANSITIONS allows from `state`, in table order."""
    return list(TRANSITIONS[state])


# -- every other refusal rule, beside the table ------------------------------------------------
# A change is refused, in this order: by role (`action_refusal`: the clock's action by a person,
# an admin action by a non-admin), by the table (TRANSITIONS / REFUSALS), then by what the
# system holds: an unforced standby with jobs running (`busy_refusal`), a withdraw with nothing
# pending (`withdraw_refusal`), an activation whose configured mode is not the one confirmed
# (`expect_refusal`). A job is refused by its systems' state and mode (`job_refusal`,
# `systems_refusal`) and by another job holding one of them (`held_refusal`).

# The launcher word that runs a job in each mode (Cerebras' reference implementations and Model
# Zoo, docs/sources.md: python / python-ws).
LAUNCHERS: dict[ExecMode, str] = {
    ExecMode.PIPELINED: "python",
    ExecMode.WEIGHT_STREAMING: "python-ws",
}

# Why a job cannot start, by system state (ACTIVE is checked against the mode instead).
JOB_REFUSALS: dict[State, str] = {
    State.STANDBY: "System {name} is in STANDBY; an admin must run `system activate` "
    "before jobs can run.",
    State.ACTIVATING: "System {name} is ACTIVATING ({ready}); wait for it to become ACTIVE, "
    "then start the job again.",
    State.FAULT: "System {name} is in FAULT ({reason}); an admin must run `system standby` and "
    "`system activate` before jobs can run.",
}


class SystemRow(Protocol):
    """What the refusals read of a system (system/changes.py's Row)."""

    @property
    def name(self) -> str: ...
    @property
    def state(self) -> State: ...
    @property
    def configured_mode(self) -> ExecMode: ...
    @property
    def active_mode(self) -> ExecMode: ...
    @property
    def activating_until(self) -> float | None: ...
    @property
    def fault_reason(self) -> str | None: ...


def _ready_in(row: SystemRow, now: float) -> float | None:
    return None if row.activating_until is None else row.activating_until - now


def action_refusal(
    action: Action,
    row: SystemRow,
    now: float,
    *,
    command: str,
    by_clock: bool,
    is_admin: bool,
    denied: str,
    several: bool = False,
) -> CsError | None:
    """Why `action` may not happen to `row` now (role first, then state), or None. `denied` is
    the sentence a non-admin sees; `several`: name the system (a cluster of several)."""
    if action in INTERNAL_ACTIONS and not by_clock:
        return PermissionDenied(
            f"Permission denied: `{command}` happens by itself when a "
            "reboot's time has passed; wait for it."
        )
    if action in ADMIN_ACTIONS and not is_admin:
        return PermissionDenied(denied)
    ready_in = _ready_in(row, now)
    try:
        next_state(row.state, action, ready_in=ready_in)
    except InvalidTransition as e:
        return InvalidTransition(f"{row.name}: {e}") if several else e
    if action is Action.BOOTED and ready_in is not None and ready_in > 0:
        return InvalidTransition(
            f"The system is ACTIVATING ({ready_text(ready_in)}); wait for it to become ACTIVE."
        )
    return None


def busy_refusal(name: str, running: list[tuple[int, str]]) -> CsError | None:
    """An unforced standby with live jobs (id, description) running: names each job's id
    (the one `jobs cancel` takes), user and command."""
    if not running:
        return None
    named = ", ".join(text for _, text in running)
    return InvalidTransition(
        f"System {name} has {len(running)} job(s) running: {named}; wait for them to "
        f"finish, cancel them (`jobs cancel {running[0][0]}`), or run `system standby "
        "--force` to stop them at their next step (the checkpoints they have written are "
        "kept)."
    )


def withdraw_refusal(row: SystemRow) -> CsError | None:
    """A withdraw with no mode change pending."""
    if row.configured_mode is row.active_mode:
        return InvalidTransition(
            f"No mode change is pending on {row.name}: it is configured for "
            f"{row.configured_mode}, the mode it runs in; nothing to withdraw."
        )
    return None


def expect_refusal(row: SystemRow, expect: ExecMode | None) -> CsError | None:
    """An activation expecting a configured mode the system no longer has."""
    if expect is None or row.configured_mode is expect:
        return None
    return InvalidTransition(
        f"{row.name} is configured for {row.configured_mode}, not {expect} as expected, so "
        "it was not rebooted; see who changed it with `audit show`, then run `config execmode "
        f"setup` or activate expecting {row.configured_mode}."
    )


def others_refusal(
    row: SystemRow, mode: ExecMode, user: str, origin: tuple[str, float] | None
) -> CsError | None:
    """A `config execmode setup` that would silently replace another account's different
    pending choice (`origin`: who made the pending choice, and when)."""
    if row.configured_mode is row.active_mode or mode is row.configured_mode:
        return None
    if origin is None or origin[0] == user:
        return None
    when = time.strftime("%H:%M:%S", time.localtime(origin[1]))
    word = mode.label.lower().replace(" ", "-")
    return InvalidTransition(
        f"{origin[0]} chose {row.configured_mode} at {when} (pending until `system "
        f"activate`); nothing changed: agree with {origin[0]} first, or replace that choice "
        f"on purpose (`config execmode setup {word} --yes`)."
    )


def job_refusal(row: SystemRow, mode: ExecMode, now: float) -> CsError | None:
    """Why a job in `mode` cannot start on this system (its state, its active mode), or None."""
    if row.state is not State.ACTIVE:
        return JobRefused(
            JOB_REFUSALS[row.state].format(
                name=row.name,
                ready=ready_text(_ready_in(row, now)),
                reason=row.fault_reason or "no reason given",
            )
        )
    if row.active_mode is not mode:
        return JobRefused(
            f"System {row.name} is ACTIVE in {row.active_mode} mode but this job needs "
            f"{mode}; launch it with `{LAUNCHERS[row.active_mode]}`, or ask an admin to "
            f"switch modes (`system standby`, `config execmode setup`, `system activate`)."
        )
    return None


def systems_refusal(rows: list[SystemRow], mode: ExecMode, now: float) -> CsError | None:
    """Why a job in `mode` cannot start on these systems (one system: `job_refusal`; several:
    one sentence naming each that is not ready and what an admin runs for it)."""
    if len(rows) == 1:
        return job_refusal(rows[0], mode, now)
    bad = [r for r in rows if job_refusal(r, mode, now) is not None]
    if not bad:
        return None
    names = ", ".join(r.name for r in rows)
    problems = "; ".join(f"{r.name} is {_row_text(r, now)} ({_fix_text(r, mode)})" for r in bad)
    return JobRefused(
        f"This job needs {len(rows)} CS-2 systems ACTIVE in {mode} ({names}; num_csx "
        f"{len(rows)} from --cs_ip {rows[0].name}), and {problems}; or start it with "
        "--cs_ip naming other systems (`system list` in cs shows them all)."
    )


def held_refusal(name: str, holder: int, who: str) -> str:
    """A system of the job is held by another job (`who` describes it)."""
    return (
        f"System {name} is in use by {who}; wait for it to end (`jobs show`), "
        f"cancel it (`jobs cancel {holder}`), or start this job on another system "
        "(--cs_ip)."
    )


def _row_text(row: SystemRow, now: float) -> str:
    """`in STANDBY`, `ACTIVE in PIPELINED mode`, `ACTIVATING (ready in 3 s)`."""
    if row.state is State.ACTIVE:
        return f"ACTIVE in {row.active_mode} mode"
    if row.state is State.ACTIVATING:
        return f"ACTIVATING ({ready_text(_ready_in(row, now))})"
    return f"in {row.state}"


def _fix_text(row: SystemRow, mode: ExecMode) -> str:
    """What an admin runs to make the system ACTIVE in `mode` (`cs --system NAME ...`)."""
    word = mode.label.lower().replace(" ", "-")
    steps: list[str] = []
    if row.state is State.ACTIVATING:
        if row.configured_mode is mode:
            return "wait for it to become ACTIVE"
        steps = ["system standby --yes", f"config execmode setup {word}", "system activate"]
    elif row.state is State.ACTIVE:
        steps = ["system standby --yes", f"config execmode setup {word}", "system activate"]
    else:  # STANDBY, FAULT: a fault is cleared by a standby first
        steps = ["system standby --yes"] if row.state is State.FAULT else []
        if row.configured_mode is not mode:
            steps.append(f"config execmode setup {word}")
        steps.append("system activate")
    return f'an admin runs `cs --system {row.name} -c "{"; ".join(steps)}"`'
