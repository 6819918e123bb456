"""--mgmt_address over TCP with TLS: the server's certificate (generated here with the openssl
CLI) verified by the client, the caller proven by a token issued on the Unix socket; a peer
without a valid token, or without TLS, is refused with one line in the server's log."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import sys

import pytest

from cs2sim.system import wire

pytestmark = [
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI"),
    pytest.mark.slow,
]  # a whole wsjob over TLS


@pytest.fixture
def tls_cluster(cs2_appliance, tmp_path):
    crt, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(crt),
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    cs2_appliance.system.run(
        [
            sys.executable,
            "-m",
            "cs2sim.scripts.cluster_server",
            "start",
            "--tcp",
            "127.0.0.1:0",
            "--cert",
            str(crt),
            "--key",
            str(key),
        ]
    ).check()
    address = (cs2_appliance.home / "wsjob" / "server.tcp").read_text().strip()
    cs2_appliance.system.env["CS2SIM_TOKEN_FILE"] = str(tmp_path / "token")
    return cs2_appliance, address, crt


def test_token_over_tls_lists_jobs_and_strangers_are_refused(tls_cluster, tmp_path):
    cluster, address, crt = tls_cluster
    cfg = tmp_path / "config"
    cfg.write_text(f"mgmtAddress: {address}\ncredentialsPath: {crt}\n")
    no_token = cluster.csctl("--csconfig", str(cfg), "get", "jobs")
    assert no_token.exit_code == 1 and "cs-cluster-server token" in no_token.errors
    cluster.system.run([sys.executable, "-m", "cs2sim.scripts.cluster_server", "token"]).check()
    token_file = tmp_path / "token"
    assert oct(token_file.stat().st_mode & 0o777) == "0o600"
    listed = cluster.csctl("--csconfig", str(cfg), "get", "jobs").check()
    assert listed.output.split() == [
        "NAME",
        "AGE",
        "DURATION",
        "PHASE",
        "SYSTEMS",
        "USER",
        "LABELS",
        "DASHBOARD",
    ]
    model = cluster.system.model_copy("fc_mnist")
    run = cluster.run_csx(
        model,
        "-p",
        "configs/params_small.yaml",
        "--mode",
        "train",
        "-o",
        "md",
        "--max_steps",
        "10",
        "--mgmt_address",
        address,
        "--credentials_path",
        str(crt),
    )
    assert run.exit_code == 0 and "Training completed successfully!" in run.output, run.combined
    # the client verifies the server: without its certificate the handshake is refused
    cfg.write_text(f"mgmtAddress: {address}\n")
    unverified = cluster.csctl("--csconfig", str(cfg), "get", "jobs")
    assert unverified.exit_code == 1 and "did not prove its identity" in unverified.errors

    host, port = address.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(crt))
    with ctx.wrap_socket(
        socket.create_connection((host, int(port))), server_hostname=host
    ) as s:  # TLS, but a made-up token
        wire.send_obj(s, {"token": "0" * 64})
        reply = wire.recv_obj(s, 4096, None)
        assert reply["ok"] is False and reply["code"] == 77
        with pytest.raises((wire.Closed, OSError)):
            wire.send_obj(s, {"op": "get_jobs", "args": {}})
            wire.recv_obj(s, 4096, None)
    with socket.create_connection((host, int(port))) as s:  # no TLS at all
        s.sendall(b"\x00\x00\x00\x02{}")
        s.settimeout(15)
        try:
            answer = s.recv(100)
        except ConnectionResetError:
            answer = b""
        assert answer == b""  # closed: no TLS session, no answer
    log = (cluster.home / "wsjob" / "server.log").read_text()
    assert "refused a TCP peer" in log and "no valid token" in log and "no TLS session" in log
    assert "Traceback" not in log
    assert os.environ.get("CS2SIM_TOKEN_FILE") is None  # the test's setting stayed in its env
