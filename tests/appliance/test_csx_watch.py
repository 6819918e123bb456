"""Watching and queueing never give up while the server lives: the server sends a heartbeat on
every watch (CS2_HEARTBEAT_SECONDS), so a job that waits in the queue with no event at all still
ends in success, the client says the queue's note again as the real client polls, and a frozen
(SIGSTOPped) server is reported as frozen while its job keeps its state."""

from __future__ import annotations

import os
import signal

import pytest

from cs2sim.runtime.cli.appliance_watch import QUEUE_NOTE_BEATS
from cs2sim.scripts.testkit.appliance import wait_until
from cs2sim.system.appliance.client import MISSED_HEARTBEATS

pytestmark = pytest.mark.slow  # each test runs whole wsjobs through a cluster server

BEAT = 0.2  # a short heartbeat, so many periods pass while the test waits for events
TRAIN = ["-p", "configs/params_small.yaml", "--mode", "train", "-o", "md", "--max_steps", "20"]


def _lines_until(proc, needle: str, count: int = 1) -> list[str]:
    """The client's output up to the `count`-th line containing `needle` (EOF fails)."""
    seen: list[str] = []
    found = 0
    for line in proc.stdout:
        seen.append(line)
        if needle in line:
            found += 1
            if found == count:
                return seen
    raise AssertionError(f"the client ended before {needle!r} x{count}: {''.join(seen)}")


def test_a_job_queued_many_heartbeats_with_no_event_still_succeeds(cs2_appliance):
    system = cs2_appliance.system
    system.env["CS2_HEARTBEAT_SECONDS"] = str(BEAT)
    model = system.model_copy("fc_mnist")
    held = system.hold_job(name="cs2-1")  # another user's run holds every window of 4
    proc = cs2_appliance.start_csx(model, *TRAIN, "--num_csx", "4")
    # nothing about the job changes while it waits: only heartbeats reach the client. The note
    # is said again every QUEUE_NOTE_BEATS of them, so three notes are 2 x 12 heartbeats of
    # silence (with the server's default period, two minutes: twice the old 60 s limit)
    seen = _lines_until(proc, "Poll ingress status", 3)
    queued = [line for line in seen if "Poll ingress status" in line]
    assert len({line.split(" INFO:", 1)[1] for line in queued}) == 1, queued  # the same note
    assert "current job status: Queueing" in queued[-1] and "cs2-1" in queued[-1]
    assert not any("error" in line.lower() for line in seen), seen
    job = next(j for j in cs2_appliance.jobs(all_states=False) if j["meta"]["type"] == "execute")
    assert job["status"]["phase"] == "QUEUED"
    system.release_job(held)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, "".join(seen) + out + err
    assert "job is scheduled" in out and "Training completed successfully!" in out
    assert cs2_appliance.job(job["meta"]["name"])["status"]["phase"] == "SUCCEEDED"
    assert QUEUE_NOTE_BEATS * 2 > 10  # the job waited over 10 heartbeat periods


def test_a_stopped_server_is_reported_frozen_and_the_job_keeps_its_state(cs2_appliance):
    system = cs2_appliance.system
    system.env["CS2_HEARTBEAT_SECONDS"] = str(BEAT)
    model = system.model_copy("fc_mnist")
    held = system.hold_job(name="cs2-1")
    proc = cs2_appliance.start_csx(model, *TRAIN, "--num_csx", "4")
    _lines_until(proc, "Poll ingress status")
    pid = cs2_appliance.pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        seen = _lines_until(proc, "has not answered")
    finally:
        os.kill(pid, signal.SIGCONT)
    frozen = seen[-1]
    assert " WARNING:" in frozen
    assert f"{MISSED_HEARTBEATS} heartbeats of {BEAT:g} s missed" in frozen
    assert f"its process {pid} is stopped" in frozen and f"kill -CONT {pid}" in frozen
    assert "is still QUEUED" in frozen and "keeps its state" in frozen
    assert "stopped with it" not in "".join(seen) and "ended with it" not in "".join(seen)
    _lines_until(proc, "answers again")
    name = next(j for j in cs2_appliance.jobs(all_states=False) if j["meta"]["type"] == "execute")
    assert name["status"]["phase"] == "QUEUED"  # its place in the queue kept
    system.release_job(held)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out + err
    assert "Training completed successfully!" in out


def test_a_killed_server_is_reported_as_a_closed_connection(cs2_appliance):
    system = cs2_appliance.system
    system.env["CS2_HEARTBEAT_SECONDS"] = str(BEAT)
    model = system.model_copy("fc_mnist")
    held = system.hold_job(name="cs2-1")
    proc = cs2_appliance.start_csx(model, *TRAIN, "--num_csx", "4")
    _lines_until(proc, "Poll ingress status")
    cs2_appliance.kill()
    out, err = proc.communicate(timeout=600)
    system.release_job(held)
    assert proc.returncode == 1
    last = (out + err).strip().splitlines()[-1]
    assert "closed the connection" in last and "has not answered" not in out + err, last
    wait_until(lambda: not cs2_appliance.running(), 300, "the server to be gone")
