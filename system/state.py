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
"""

from __future__ import annotations

import enum
import math

from cs2sim.system.errors import InvalidTransition, UsageError

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
]


class State(enum.StrEnum):
    """Where the CS-2 system is in its life cycle."""

    ACTIVE = "ACTIVE"
    STANDBY = "STANDBY"
    ACTIVATING = "ACTIVATING"
    FAULT = "FAULT"


class ExecMode(enum.StrEnum):
    """The execution mode a system is configured for / booted into (Weight Streaming Quickstart,
    Section 1, docs/sources.md)."""

    PIPELINED = "PIPELINED"
    WEIGHT_STREAMING = "WEIGHT_STREAMING"

    @property
    def label(self) -> str:
        """The menu label of DOC-WSQ: "Pipelined" / "Weight Streaming"."""
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
    "pipeline": ExecMode.PIPELINED,  # SYS101: "choose pipeline/weight streaming"
    "layer pipelined": ExecMode.PIPELINED,
    "weight streaming": ExecMode.WEIGHT_STREAMING,
    "weightstreaming": ExecMode.WEIGHT_STREAMING,
    "ws": ExecMode.WEIGHT_STREAMING,
}


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
