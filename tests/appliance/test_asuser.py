"""asuser.call_as: a child that became the user answers, refuses with its own sentence and exit
code, is cut off at the size limit and at the time limit (a child blocked for ever, so no
machine's speed decides), and runs with the user's own groups and nothing more."""

from __future__ import annotations

import json
import os
import pwd
import signal

import pytest

from cs2sim.system.appliance.asuser import (
    Account,
    AsUserError,
    TimedOut,
    TooLarge,
    call_as,
)
from cs2sim.system.errors import PermissionDenied


def test_an_answer_a_refusal_and_the_limits():
    me = Account.of(os.geteuid())
    assert call_as(me, lambda: b"hello", limit=1024, timeout=60) == b"hello"

    def refuse() -> bytes:
        raise PermissionDenied("Permission denied: not yours")

    with pytest.raises(AsUserError) as refused:
        call_as(me, refuse, limit=1024, timeout=60)
    assert str(refused.value) == "Permission denied: not yours"
    assert refused.value.exit_code == 77

    with pytest.raises(TooLarge):
        call_as(me, lambda: b"x" * (3 << 20), limit=1 << 20, timeout=60)

    def blocked() -> bytes:  # waits for a signal that never comes: blocked for ever
        signal.pause()
        return b""

    with pytest.raises(TimedOut, match="took longer than 0.3 s"):
        call_as(me, blocked, limit=1024, timeout=0.3)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another OS user")
def test_the_child_has_the_users_ids_and_groups_and_no_way_back():
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody")
    account = Account.of(nobody.pw_uid)
    assert account.groups == tuple(os.getgrouplist(nobody.pw_name, nobody.pw_gid))

    def who() -> bytes:
        try:
            os.setuid(0)
            back = "root again"
        except PermissionError:
            back = "no way back"
        fds = os.listdir("/proc/self/fd")
        ids = [os.getresuid(), os.getresgid(), sorted(os.getgroups()), back, len(fds)]
        return json.dumps(ids).encode()

    got = call_as(account, who, limit=4096, timeout=60)
    uid, gid = nobody.pw_uid, nobody.pw_gid
    groups = sorted(set(account.groups))
    # its one inherited descriptor is the answer's pipe (listdir's own makes two)
    assert json.loads(got) == [[uid] * 3, [gid] * 3, groups, "no way back", 2]


def test_a_server_that_is_not_root_acts_only_as_itself():
    if os.geteuid() == 0:
        pytest.skip("root may act as anyone")
    other = next(p for p in pwd.getpwall() if p.pw_uid != os.geteuid())
    with pytest.raises(PermissionDenied, match="cannot act as"):
        call_as(Account.of(other.pw_uid), lambda: b"", limit=1, timeout=1)
