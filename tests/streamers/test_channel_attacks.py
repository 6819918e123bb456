"""A rogue local process attacks a running job's chief (object dtypes, memory, claiming the
streamer ranks, malformed hellos): the job finishes exactly as an undisturbed run, each attempt
is named in the chief's log, and the chief's memory does not grow with the attacker's lengths."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cs2sim.runtime.job import channel
from streamers.conftest import FC_SMALL, Job

ROGUE = Path(__file__).with_name("rogue.py")


@pytest.mark.slow
def test_a_rogue_process_cannot_disturb_or_crash_a_running_job(tmp_path, jobs):
    # long enough that the chief is still there while the attacks are held (its memory is read)
    base = ["-m", "train", "-p", FC_SMALL, "--max_steps", "200", "--save_checkpoints_steps", "200"]
    plain, attacked = tmp_path / "plain", tmp_path / "attacked"
    jobs.append(Job("fc_mnist", [*base, "-o", str(plain)], (1,), tmp_path, job="950"))
    assert jobs[-1].wait(120) == [0]
    rdv = attacked / ".cs2sim" / "rendezvous" / "951"
    rogue = subprocess.Popen(
        [sys.executable, str(ROGUE), str(rdv), "2"], stdout=subprocess.PIPE, text=True
    )
    secret = {channel.SECRET_ENV: "5e" * 32}  # as the launcher gives it
    jobs.append(
        Job("fc_mnist", [*base, "-o", str(attacked)], (1, 2), tmp_path, job="951", extra_env=secret)
    )
    report = json.loads(rogue.communicate(timeout=120)[0])
    assert jobs[-1].wait(120) == [0, 0, 0]
    # the same training: every weight of the final checkpoint identical
    a, b = np.load(plain / "model-ckpt-200.npz"), np.load(attacked / "model-ckpt-200.npz")
    assert all(np.array_equal(a[k], b[k]) for k in a.files if k != "__digest__")
    log = jobs[-1].log(0)
    assert "Traceback" not in log and "Traceback" not in jobs[-1].log(1)
    refused = re.findall(r"Refused a connection to the chief from 127\.0\.0\.1:(\d+)", log)
    ports = [a["port"] for a in report["attempts"]]
    assert None not in ports and sorted(map(int, refused)) == sorted(ports), log
    assert "claiming to be streamer 0 of job 951" in log  # what it claimed is named
    assert "did not prove it holds the job's secret" in log
    assert "a message of 1,073,741,824 bytes" in log and "dtype 'O'" in log
    assert 0 < report["chief_peak_kb"] < 900_000  # three 1 GiB prefixes allocated nothing
    # the address and the secret went with the job; only its 0600 outcome record stays
    assert sorted(p.name for p in rdv.iterdir()) == ["ended.json"]
    assert (rdv / "ended.json").stat().st_mode & 0o777 == 0o600


def test_rendezvous_files_are_the_users_only_and_a_killed_chiefs_are_cleaned(tmp_path):
    from cs2sim.runtime.job import rendezvous

    md = tmp_path / "md"
    d = rendezvous.make_job_dir(md, "7")
    rendezvous.write_secret(d, channel.new_secret())
    rendezvous.write_address(d, {"job": "7", "port": 1, "hosts": []})
    assert d.stat().st_mode & 0o777 == 0o700 and d.parent.stat().st_mode & 0o777 == 0o700
    assert all((d / f).stat().st_mode & 0o777 == 0o600 for f in ("secret", "chief.json"))
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    doc = json.loads((d / "chief.json").read_text())
    (d / "chief.json").write_text(json.dumps({**doc, "pid": int(dead)}))  # as after kill -9
    assert rendezvous.clean_stale(md) == ["7"] and not d.exists()


def test_frames_are_bounded_and_checked_before_allocation():
    a, b = socket.socketpair()
    with a, b:
        a.sendall((1 << 31).to_bytes(4, "big"))
        with pytest.raises(channel.FrameError, match="message of 2,147,483,648 bytes"):
            channel.recv_header(b)
    for arrays, phrase in [
        ([["x", "O", [1]]], "numeric dtypes only"),
        ([["x", "<f4", [1 << 30, 1 << 30]]], "more than"),
        ([["x", "<f4", [-1]]], "impossible shape"),
        ([["x", "V8", [1]]], "numeric dtypes only"),
        ([["x", "<f4", [2]], ["x", "<f4", [2]]], "same name"),
    ]:
        with pytest.raises(channel.FrameError, match=phrase):
            channel.check_arrays({"arrays": arrays})
    want = [("x", np.dtype("<f4"), (4, 3))]
    with pytest.raises(channel.FrameError, match="were expected"):
        channel.check_arrays({"arrays": [["x", "<f4", [5, 3]]]}, want)
    assert channel.check_arrays({"arrays": [["x", "<f4", [4, 3]]]}, want) == want
