"""The handshake's two proofs, each direction: a hello's MAC covers the whole claim (a proof made
for one rank, job or task type is refused for another), and a streamer refuses a chief that
cannot prove the job's secret. Built from runtime/job/channel.py's functions, against the real
chief hub and the real streamer-side handshake."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from cs2sim.runtime.job import channel, client
from cs2sim.runtime.job.channel import Closed, recv_frame, send_frame
from cs2sim.runtime.job.hub import ChiefHub
from cs2sim.runtime.job.roles import task_info
from cs2sim.system.errors import RuntimeFailure
from streamers.conftest import slurm_env

SECRET = bytes.fromhex("5e" * 32)
OTHER = bytes.fromhex("a7" * 32)
JOB = "961"
HANG_S = 300  # a guard against a hang, never a speed requirement (a loaded host is slow)
CLAIM = {"type": "streamer", "job": JOB, "rank": 0, "procid": 1, "node": "worker-0", "pid": 4242}
# each field of the claim, changed to what an impostor would claim instead
FORGED = {
    "type": "coordinator",
    "job": "962",
    "rank": 1,
    "procid": 2,
    "node": "worker-9",
    "pid": 4343,
}


@pytest.mark.parametrize("key", sorted(FORGED))
def test_a_proof_covers_every_field_of_the_claim(key: str) -> None:
    nc, nt = channel.nonce(), channel.nonce()
    proof = channel.hello_proof(SECRET, nc, nt, channel.claim_text(CLAIM))
    forged = {**CLAIM, key: FORGED[key]}
    assert not channel.proof_ok(
        proof, channel.hello_proof(SECRET, nc, nt, channel.claim_text(forged))
    )
    assert channel.proof_ok(
        proof, channel.hello_proof(SECRET, nc, nt, channel.claim_text(dict(CLAIM)))
    )


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A real chief hub for job 961 (two streamers) holding SECRET, as the launcher gives it."""
    monkeypatch.setenv(channel.SECRET_ENV, SECRET.hex())
    h = ChiefHub(task_info(slurm_env(JOB, 0, (1, 2))), tmp_path / "md")
    yield h
    h.end(0)


def say_hello(port: int, claim: dict, proved: dict) -> dict:
    """Connect, answer the challenge with `claim` and a proof made over `proved`; the reply
    (raises Closed when the chief hangs up instead)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        challenge, _ = recv_frame(sock)
        nt = channel.nonce()
        hello = {**claim, "nonce": nt}
        hello["proof"] = channel.hello_proof(
            SECRET, challenge["nonce"], nt, channel.claim_text({**proved, "nonce": nt})
        )
        send_frame(sock, hello)
        reply, _ = recv_frame(sock)
        return reply


def wait_refused(hub: ChiefHub, count: int) -> None:
    deadline = time.monotonic() + 30
    while hub.refused < count:  # the refusal is counted after the socket is closed
        assert time.monotonic() < deadline, "the chief never counted the refusal"
        time.sleep(0.01)


@pytest.mark.parametrize("key", ["rank", "job", "type", "procid", "pid"])
def test_the_chief_refuses_a_hello_whose_proof_was_made_for_another_claim(hub, key) -> None:
    forged = {**CLAIM, key: FORGED[key]}
    with pytest.raises(Closed):
        say_hello(hub.port, forged, proved=CLAIM)  # proved as streamer 0 of job 961, claims other
    wait_refused(hub, 1)
    assert hub.links == {} and hub.coordinators == []


def test_the_chief_welcomes_a_hello_proved_for_its_own_claim(hub) -> None:
    reply = say_hello(hub.port, CLAIM, proved=CLAIM)
    assert reply["type"] == "welcome" and hub.refused == 0


def fake_chief(sock: socket.socket, secret: bytes) -> None:
    """The chief's side of the handshake, proving `secret` (the wrong one for an impostor)."""
    nc = channel.nonce()
    send_frame(sock, {"type": "challenge", "nonce": nc})
    hello, _ = recv_frame(sock)
    send_frame(
        sock, {"type": "welcome", "proof": channel.welcome_proof(secret, hello["nonce"], nc)}
    )


@pytest.mark.parametrize(
    ("chief_secret", "accepted"),
    [(SECRET, True), (OTHER, False)],
    ids=["the job's secret", "another secret"],
)
def test_a_streamer_refuses_a_chief_that_cannot_prove_the_secret(chief_secret, accepted) -> None:
    task, chief = socket.socketpair()
    with task, chief:
        t = threading.Thread(target=fake_chief, args=(chief, chief_secret), daemon=True)
        t.start()
        if accepted:
            assert client._handshake(task, SECRET, dict(CLAIM)) is task
        else:
            with pytest.raises(RuntimeFailure, match="did not prove it holds the job's secret"):
                client._handshake(task, SECRET, dict(CLAIM))
        t.join(30)


def test_a_streamer_refuses_a_welcome_without_a_proof() -> None:
    task, chief = socket.socketpair()
    with task, chief:

        def no_proof() -> None:
            send_frame(chief, {"type": "challenge", "nonce": channel.nonce()})
            recv_frame(chief)
            send_frame(chief, {"type": "welcome"})

        t = threading.Thread(target=no_proof, daemon=True)
        t.start()
        with pytest.raises(RuntimeFailure):
            client._handshake(task, SECRET, dict(CLAIM))
        t.join(30)


def test_a_streamer_that_hung_up_leaves_no_socket_open_after_the_end(hub) -> None:
    reply = say_hello(hub.port, CLAIM, CLAIM)  # welcomed, then the streamer hangs up
    assert reply["type"] == "welcome", reply
    deadline = time.monotonic() + 30
    while (link := hub.links.get(0)) is None or link.dead is None:
        assert time.monotonic() < deadline, "the chief never saw the streamer leave"
        time.sleep(0.01)
    assert link.sock.fileno() != -1  # a broken link's socket waits for the end
    hub.end(0)
    assert link.sock.fileno() == -1  # closed by the end, not left to the garbage collector


def wait_joined(hub: ChiefHub, rank: int) -> socket.socket:
    deadline = time.monotonic() + HANG_S
    while rank not in hub.links:
        assert time.monotonic() < deadline, "the streamer never joined"
        time.sleep(0.01)
    return hub.links[rank].sock


def test_a_streamer_that_gave_up_on_its_welcome_may_connect_again(hub) -> None:
    """On a loaded host a streamer's handshake deadline can pass while the chief's welcome is on
    its way: the chief has joined it, the streamer closed and connects again. The second hello
    of the same task (rank, task, node, pid) takes the first one's place; the job goes on."""
    say_hello(hub.port, CLAIM, proved=CLAIM)  # welcomed; this side then hangs up, as a timeout
    first = wait_joined(hub, 0)
    reply = say_hello(hub.port, CLAIM, proved=CLAIM)
    assert reply["type"] == "welcome"
    deadline = time.monotonic() + HANG_S
    while hub.links[0].sock is first and hub.bad_hello is None:  # joined after its welcome
        assert time.monotonic() < deadline, "the second connection never joined"
        time.sleep(0.01)
    assert hub.bad_hello is None and hub.links[0].sock is not first


def test_another_task_claiming_a_joined_rank_fails_the_layout(hub) -> None:
    """Two different tasks announcing one rank is a launch whose tasks disagree: refused."""
    say_hello(hub.port, CLAIM, proved=CLAIM)
    wait_joined(hub, 0)
    other = {**CLAIM, "procid": 2, "pid": 4343}
    say_hello(hub.port, other, proved=other)  # welcomed by the door, then refused on joining
    deadline = time.monotonic() + HANG_S
    while hub.bad_hello is None:
        assert time.monotonic() < deadline, "the second claim of rank 0 was never refused"
        time.sleep(0.01)
    assert "task 2 on node worker-0 announced streamer rank 0 of 2" in hub.bad_hello
