"""The transition table itself: shape, refusals, modes."""

from __future__ import annotations

import itertools

import pytest

from cs2sim.system.errors import InvalidTransition, UsageError
from cs2sim.system.state import (
    ADMIN_ACTIONS,
    INTERNAL_ACTIONS,
    REFUSALS,
    TRANSITIONS,
    Action,
    ExecMode,
    State,
    allowed_actions,
    next_state,
)

ALL_PAIRS = list(itertools.product(State, Action))
MISSING = [(s, a) for s, a in ALL_PAIRS if a not in TRANSITIONS[s]]


def test_the_quickstarts_path_is_in_the_table():
    # the Quickstart's path:
    # ACTIVE -standby-> STANDBY -setup-> STANDBY -activate-> ACTIVATING -booted-> ACTIVE
    state = State.ACTIVE
    for action, expected in [
        (Action.STANDBY, State.STANDBY),
        (Action.SETUP, State.STANDBY),
        (Action.ACTIVATE, State.ACTIVATING),
        (Action.BOOTED, State.ACTIVE),
    ]:
        state = next_state(state, action)
        assert state is expected


def test_every_state_has_a_row_and_every_target_is_a_state():
    assert set(TRANSITIONS) == set(State)
    for row in TRANSITIONS.values():
        assert all(isinstance(a, Action) and isinstance(t, State) for a, t in row.items())


def test_refusals_cover_exactly_the_missing_pairs():
    assert set(REFUSALS) == set(MISSING)


@pytest.mark.parametrize(("state", "action"), MISSING)
def test_missing_pair_raises_one_sentence_naming_the_state(state, action):
    with pytest.raises(InvalidTransition) as err:
        next_state(state, action, ready_in=2.2)
    message = str(err.value)
    # names the state it is in, or (for execmode setup, text fixed by the API) the one it needs
    assert state.value in message or (action is Action.SETUP and "STANDBY" in message)
    assert message.endswith(".") and "{" not in message
    if state is not State.ACTIVATING:  # the fix is a command, except "wait" while rebooting
        assert "`system " in message
    else:
        assert "ready in 3 s" in message  # rounded up, never promising too early


def test_setup_refusal_names_the_fix():
    with pytest.raises(
        InvalidTransition, match=r"only be changed in STANDBY; run `system standby`"
    ):
        next_state(State.ACTIVE, Action.SETUP)


def test_allowed_actions_follow_the_table():
    for state in State:
        assert allowed_actions(state) == list(TRANSITIONS[state])
    assert Action.SETUP in allowed_actions(State.STANDBY)
    assert Action.SETUP not in allowed_actions(State.ACTIVE)


def test_roles_partition_the_actions():
    assert ADMIN_ACTIONS | INTERNAL_ACTIONS == set(Action)
    assert not ADMIN_ACTIONS & INTERNAL_ACTIONS


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("weight-streaming", ExecMode.WEIGHT_STREAMING),
        ("weight_streaming", ExecMode.WEIGHT_STREAMING),
        ("ws", ExecMode.WEIGHT_STREAMING),
        ("Weight Streaming", ExecMode.WEIGHT_STREAMING),
        ("WEIGHT_STREAMING", ExecMode.WEIGHT_STREAMING),
        ("weight", ExecMode.WEIGHT_STREAMING),
        ("pipelined", ExecMode.PIPELINED),
        ("Pipelined", ExecMode.PIPELINED),
        ("PIPELINED", ExecMode.PIPELINED),
        ("pipeline", ExecMode.PIPELINED),
    ],
)
def test_execmode_parse(text, mode):
    assert ExecMode.parse(text) is mode


@pytest.mark.parametrize("text", ["", "x", "streaming pipelined", "3"])
def test_execmode_parse_refuses_with_the_choices(text):
    with pytest.raises(UsageError, match="choose `pipelined` or `weight-streaming`"):
        ExecMode.parse(text)


def test_execmode_labels_and_firmware():
    assert ExecMode.PIPELINED.label == "Pipelined"
    assert ExecMode.WEIGHT_STREAMING.label == "Weight Streaming"
    assert (ExecMode.PIPELINED.firmware, ExecMode.WEIGHT_STREAMING.firmware) == (
        "faraday",
        "ampere",
    )
