"""A hostile user against a root-run site server: every path a request names is looked at, and
every file an export zips is read, with the CALLER's (or the job owner's) rights, never root's.
A root-only 0600 secret and another user's 0700 home are planted; their bytes must appear in no
reply, no output and no archive. Needs root and useradd; skipped otherwise."""

from __future__ import annotations

import base64
import io
import json
import secrets
import zipfile
from pathlib import Path
from typing import Any

import pytest
from site_helpers import CAN, WHY, give, site, user_model

pytestmark = [pytest.mark.skipif(not CAN, reason=WHY), pytest.mark.slow]

ASK = """
import json, sys
from pathlib import Path
from cs2sim.system.appliance.client import RequestFailed, connect
out = []
for op, args in json.loads(sys.argv[1]):
    conn = connect(Path(sys.argv[2]))
    try:
        if op == "watch":
            out.append({"ok": True, "events": list(conn.watch(**args))})
        else:
            out.append(conn.call(op, **args))
    except RequestFailed as e:
        out.append({"ok": False, "error": str(e), "code": e.exit_code})
    finally:
        conn.close()
print(json.dumps(out))
"""


PROBE = """
import os, sys
for what, path in (("secret", {secret!r}), ("notes", {notes!r})):
    try:
        with open(path, "rb") as f:
            sys.stderr.write("probe: read " + what + " " + f.read().decode() + "\\n")
    except OSError as e:
        sys.stderr.write("probe: " + what + " refused (" + type(e).__name__ + ")\\n")
try:
    os.listdir({home!r})
    sys.stderr.write("probe: entered home\\n")
except OSError as e:
    sys.stderr.write("probe: home refused (" + type(e).__name__ + ")\\n")
"""


def _ask(cluster: Any, user: Any, cwd: Path, requests: list[tuple[str, dict]]) -> list[dict]:
    """Raw requests to the server as `user` (a real process of theirs, their own groups)."""
    res = cluster.run_as(
        user,
        [cluster.python, "-c", ASK, json.dumps(requests), str(cluster.home)],
        cwd,
    )
    assert res.exit_code == 0, res.combined
    return list(json.loads(res.output))


def _spec(model: Path, **extra: Any) -> dict[str, Any]:
    return {
        "cwd": str(model),
        "run_py": str(model / "run.py"),
        "wrapper": "python-ws",
        "args": ["--mode", "train", "-p", "configs/params_small.yaml", "-o", "md"],
        "env": {"PATH": "/usr/bin:/bin"},
        **extra,
    }


def _submit(model: Path, **extra: Any) -> tuple[str, dict]:
    return ("submit", {"kind": "execute", "num_csx": 1, "spec": _spec(model, **extra)})


def test_a_hostile_user_reads_nothing_they_could_not_read(cs2_systems):
    with site(cs2_systems, 2) as (cluster, top, users, group):
        attacker, victim = users
        secret = secrets.token_hex(32).encode()  # root's alone
        vault = top / "vault"
        vault.mkdir(mode=0o700)
        (vault / "shadow").write_bytes(secret)
        (vault / "shadow").chmod(0o600)
        (vault / "cs_0123456789abcdef").mkdir(mode=0o700)
        (vault / "cs_0123456789abcdef" / "shadow").write_bytes(secret)
        theirs = secrets.token_hex(32).encode()  # the victim's alone
        vhome = top / "users" / victim.pw_name
        (vhome / "lib").mkdir()
        (vhome / "notes").write_bytes(theirs)
        give(vhome, victim)
        (vhome / "notes").chmod(0o600)
        model = user_model(top, attacker)
        vmodel = user_model(top, victim)
        cluster.start()
        system = cluster.system
        held = [system.hold_job(name=n) for n in ("cs2-1", "cs2-2")]  # every job stays QUEUED

        # each path a submission names, outside the attacker's rights: refused, one sentence
        refused = _ask(
            cluster,
            attacker,
            model,
            [
                _submit(model, compile_dir=str(vault), compile_hash="cs_0123456789abcdef"),
                _submit(model, compile_dir="/etc", compile_hash="."),
                _submit(model, compile_dir=str(model), compile_hash="../../vault"),
                _submit(vhome),
                _submit(model, cwd=str(vhome)),
                _submit(model, mount_dirs=[str(vhome / "lib")]),
                _submit(model, python_paths=[str(vhome / "lib")]),
            ],
        )
        said = [(r.get("code"), r.get("error", "")) for r in refused]
        assert [r["ok"] for r in refused] == [False] * 7, refused
        assert said[0][0] == 77 and said[0][1].startswith(
            f"Permission denied: the compile directory {vault} cannot be entered by you "
            f"({attacker.pw_name}: Permission denied)"
        )
        assert said[1] == (
            2,
            "bad request: spec.compile_hash must be a compile's name, cs_ and hexadecimal digits.",
        )
        assert said[2][0] == 2
        for (code, text), what in zip(
            said[3:],
            ["the working directory", "the working directory", "--mount_dirs", "--python_paths"],
            strict=True,
        ):
            assert code == 77 and text.startswith(f"Permission denied: {what} "), text
            assert text.count(". ") == 0  # one sentence
        assert cluster.jobs() == []  # nothing was booked

        # the victim's own job: the attacker may not export it (nor watch nor cancel it)
        (vjob,) = _ask(cluster, victim, vmodel, [_submit(vmodel)])
        vname = vjob["job"]["meta"]["name"]
        denied = _ask(
            cluster,
            attacker,
            model,
            [("log_export", {"name": vname}), ("cancel", {"name": vname})],
        )
        assert [(r["ok"], r["code"]) for r in denied] == [(False, 77), (False, 77)]
        assert denied[0]["error"].startswith(f"Permission denied: {vname} belongs to")

        # the attacker's own job, its compile directory holding links to the secrets and a
        # file over the archive's cap (sparse: nothing is written, nothing need be read)
        compiled = model / "compiles" / "cs_00112233445566778899aabbccddeeff"
        compiled.mkdir(parents=True)
        (compiled / "root-secret").symlink_to(vault / "shadow")
        (compiled / "their-notes").symlink_to(vhome / "notes")
        (compiled / "ok.txt").write_text("the attacker's own\n")
        with open(compiled / "big.bin", "wb") as f:
            f.truncate(65 * 1024 * 1024)
        give(model, attacker)
        (mine,) = _ask(
            cluster,
            attacker,
            model,
            [_submit(model, compile_dir=str(model / "compiles"), compile_hash=compiled.name)],
        )
        name = mine["job"]["meta"]["name"]
        over = _ask(cluster, attacker, model, [("log_export", {"name": name, "compile": True})])
        assert over[0]["ok"] is False and over[0]["error"] == (
            f"{name}'s logs could not be exported: the export would hold 65.0 MiB, over the cap "
            "of 64 MiB for one archive; ask for less (--num-lines N, --tasks, or without "
            "-c)."
        ), over
        (compiled / "big.bin").unlink()

        # the job's own log replaced by a link to root's secret (the directory is the
        # attacker's): the server neither streams nor zips it
        log_dir = cluster.home / "wsjob" / "workdir" / "job-operator" / name
        assert log_dir.stat().st_uid == attacker.pw_uid
        cluster.run_as(
            attacker,
            ["/bin/ln", "-sf", str(vault / "shadow"), str(log_dir / "launch.log")],
            model,
        ).check()
        replies = _ask(
            cluster,
            attacker,
            model,
            [
                ("log_export", {"name": name, "compile": True}),
                ("cancel", {"name": name}),
                ("watch", {"name": name}),
            ],
        )
        assert [r["ok"] for r in replies] == [True, True, True], replies
        archive = zipfile.ZipFile(io.BytesIO(base64.b64decode(replies[0]["zip"])))
        names = set(archive.namelist())
        assert f"log-export-{name}/compile/ok.txt" in names
        assert not any(n.endswith(("root-secret", "their-notes", "launch.log")) for n in names)
        contents = b"".join(archive.read(n) for n in names)
        # root (an admin) exporting the attacker's job gets what the attacker may read
        export_dir = top / "exports"
        export_dir.mkdir()
        cluster.csctl("log-export", name, "-c", "-p", str(export_dir)).check()
        with zipfile.ZipFile(export_dir / f"log-export-{name}.zip") as z:
            contents += b"".join(z.read(n) for n in z.namelist())

        # a real job of the attacker's whose every Python process first tries to read the
        # secrets and enter the victim's home (a sitecustomize on its --python_paths): it
        # runs to the end with the attacker's rights, and every try is refused
        cluster.csctl("cancel", "job", vname).check()
        for job in held:
            system.release_job(job)
        probe = model / "probe"
        probe.mkdir()
        (probe / "sitecustomize.py").write_text(
            PROBE.format(secret=str(vault / "shadow"), notes=str(vhome / "notes"), home=str(vhome))
        )
        give(probe, attacker)
        run = cluster.run_csx_as(
            attacker,
            model,
            *["-p", "configs/params_small.yaml", "--mode", "train", "-o", "md"],
            *["--num_csx", "1", "--max_steps", "5", "--python_paths", str(probe)],
        )
        assert run.exit_code == 0, run.combined
        ran = [j for j in cluster.jobs() if j["spec"]["user"]["uid"] == attacker.pw_uid]
        ran = [j for j in ran if j["status"]["phase"] == "SUCCEEDED"]
        assert {j["meta"]["type"] for j in ran} == {"compile", "execute"}
        logs = b""
        for job in ran:
            log = Path(job["status"]["logPath"]) / "launch.log"
            assert log.stat().st_uid == attacker.pw_uid
            logs += log.read_bytes()
        assert logs.count(b"probe: secret refused") >= 2  # the launcher and the run, at least
        assert logs.count(b"probe: secret refused") == logs.count(b"probe: notes refused")
        assert logs.count(b"probe: secret refused") == logs.count(b"probe: home refused")
        assert b"probe: read" not in logs and b"probe: entered" not in logs

        everything = json.dumps([refused, denied, over, replies]).encode() + contents
        everything += logs + run.combined.encode()
        for planted in (secret, theirs):
            assert planted not in everything
        assert secret not in (cluster.home / "wsjob" / "server.log").read_bytes()
