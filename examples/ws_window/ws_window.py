#!/usr/bin/env python3
"""Run one job in a weight-streaming window: the kind of script a CS-2 admin team writes.

    ws_window.py [--system NAME] [--cs "ssh root@cs2 cs"] [--boot-timeout 600] -- JOB COMMAND...

1. Reads the system (`cs system show --output-format=json`).
2. Refuses to touch a system that is in FAULT (exit 3) or that has jobs running (exit 4): a
   standby under somebody's job would stop it.
3. If the system is not already ACTIVE in weight streaming: `system standby`, `config execmode
   setup weight-streaming`, `system activate`, then waits until it reports ACTIVE (exit 5 if the
   reboot does not complete within --boot-timeout).
4. Runs JOB COMMAND (e.g. `csrun_wse ... python-ws run.py ... --cs_ip <ip>`), streaming its output.
5. Puts the system back into the mode it found (same three commands), even when the job failed.
6. Exits with the job's exit code (or the first failure's code above).

It talks to the system only through the `cs` command (here `cs` on this machine; on a real
installation, `--cs "ssh root@<system> cs"`), so its test suite (tests/) runs it unchanged
against a throwaway cs2sim system with the testing kit's fixtures.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time

EXIT_FAULT, EXIT_BUSY, EXIT_BOOT = 3, 4, 5
WS = "WEIGHT_STREAMING"


class Abort(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def cs(base: list[str], system: str | None, command: str) -> str:
    """Run one cs command; its output, or Abort with cs's own error line."""
    argv = [*base, *(["--system", system] if system else []), *shlex.split(command)]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode:
        raise Abort(proc.returncode, f"`{command}` failed: {proc.stderr.strip() or proc.stdout}")
    return proc.stdout


def show(base: list[str], system: str | None) -> dict:
    return json.loads(cs(base, system, "system show --output-format=json"))


def switch(base: list[str], system: str | None, mode: str, boot_timeout: float) -> None:
    """standby, setup, activate; then wait for ACTIVE in `mode`."""
    word = "weight-streaming" if mode == WS else "pipelined"
    print(f"ws_window: switching {system or 'the system'} to {mode}", flush=True)
    cs(base, system, "system standby --yes")
    cs(base, system, f"config execmode setup {word}")
    cs(base, system, "system activate")
    deadline = time.monotonic() + boot_timeout
    while True:
        now = show(base, system)
        if now["state"] == "ACTIVE" and now["active_execmode"] == mode:
            return
        if now["state"] == "FAULT":
            raise Abort(
                EXIT_FAULT, f"the system went to FAULT while activating: {now['fault_reason']}"
            )
        if time.monotonic() > deadline:
            raise Abort(
                EXIT_BOOT,
                f"the system was not ACTIVE in {mode} after "
                f"{boot_timeout:g} s (it is {now['state']})",
            )
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("--system", help="the CS-2 system (default: cs's default)")
    p.add_argument("--cs", default="cs", help="how to run cs (default: cs)")
    p.add_argument("--boot-timeout", type=float, default=600.0)
    p.add_argument("job", nargs=argparse.REMAINDER, help="-- then the job's command")
    args = p.parse_args(argv)
    job = args.job[1:] if args.job[:1] == ["--"] else args.job
    if not job:
        p.error("give the job's command after --")
    base = shlex.split(args.cs)
    try:
        found = show(base, args.system)
        if found["state"] == "FAULT":
            raise Abort(
                EXIT_FAULT, f"the system is in FAULT ({found['fault_reason']}); not touching it"
            )
        if found["running_jobs"]:
            ids = ", ".join(str(j["id"]) for j in found["running_jobs"])
            raise Abort(EXIT_BUSY, f"jobs are running on the system ({ids}); try again later")
        original = found["active_execmode"]
        if not (found["state"] == "ACTIVE" and original == WS):
            switch(base, args.system, WS, args.boot_timeout)
        print(f"ws_window: running {shlex.join(job)}", flush=True)
        code = subprocess.run(job).returncode
        print(f"ws_window: the job exited {code}", flush=True)
        if original != WS:
            switch(base, args.system, original, args.boot_timeout)
        return code
    except Abort as e:
        print(f"ws_window: error: {e}", file=sys.stderr)
        return e.code


if __name__ == "__main__":
    sys.exit(main())
