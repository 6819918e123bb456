"""`cs-cluster-server`: the Wafer-Scale Cluster's management server for $CS2_HOME.

    cs-cluster-server start [--tcp HOST:PORT --cert CRT --key KEY]
                              start it in the background (a no-op when one runs); `run.py CSX`
                              and `csctl` start one themselves when none runs (`start --auto`):
                              that one exits after CS2_SERVER_IDLE_SECONDS with no job and no
                              connection, and a caller whose cluster file (CS2_CLUSTER) differs
                              from the one it was started with is refused
    cs-cluster-server status  whether it answers, its pid, version and who you are to it
    cs-cluster-server stop    stop it (its running jobs are stopped and recorded FAILED)
    cs-cluster-server serve   run it in the foreground (what `start` runs, detached)
    cs-cluster-server token   get a token for --mgmt_address (TCP): written to ~/.cs/token

The server runs wsjobs through csrun_cpu (compile) and csrun_wse (execute), so they share the
scheduler with launcher jobs. docs/appliance.md explains the design.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from cs2sim.system.errors import CsError

if TYPE_CHECKING:
    from cs2sim.system.appliance.runs import Launchers

__all__ = ["main", "start_command", "launchers"]


def launchers() -> Launchers:
    from cs2sim.system.appliance.runs import Launchers

    return Launchers(
        cpu=(sys.executable, "-m", "cs2sim.scripts.csrun_cpu"),
        wse=(sys.executable, "-m", "cs2sim.scripts.csrun_wse"),
    )


def start_command() -> list[str]:
    """The command `run.py CSX` and `csctl` run to start a server on demand."""
    return [sys.executable, "-m", "cs2sim.scripts.cluster_server", "start", "--auto"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cs-cluster-server", description="The Wafer-Scale Cluster management server."
    )
    p.add_argument("command", choices=("start", "stop", "status", "serve", "token"))
    p.add_argument("--tcp", metavar="HOST:PORT", help="also listen on TCP with TLS")
    p.add_argument("--cert", help="the TLS certificate (PEM) for --tcp")
    p.add_argument("--key", help="the TLS private key (PEM) for --tcp")
    p.add_argument(
        "--auto",
        action="store_true",
        help="started on demand by a client: exit when idle (CS2_SERVER_IDLE_SECONDS)",
    )
    return p


def _serve(home: object, args: argparse.Namespace) -> int:
    from pathlib import Path

    from cs2sim.system.appliance.server import Server, server_dir

    Path(str(home)).mkdir(parents=True, exist_ok=True, mode=0o700)
    log_path = server_dir(Path(str(home))) / "server.log"
    logging.basicConfig(
        filename=log_path, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s"
    )
    server = Server(Path(str(home)), launchers())
    if args.auto:
        from cs2sim.system import knobs
        from cs2sim.system.appliance.server import IDLE_EXIT_DEFAULT_S

        server.idle_exit_s = max(0.0, knobs.number("CS2_SERVER_IDLE_SECONDS", IDLE_EXIT_DEFAULT_S))
    if args.tcp:
        from cs2sim.system.appliance.tls import listen_tls

        listen_tls(server, args.tcp, args.cert, args.key)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: server.stop())
    logging.getLogger("cs2sim.appliance").info("serving %s (pid %d)", home, os.getpid())
    server.serve_forever()
    return 0


def main(argv: list[str] | None = None) -> int:
    from cs2sim.system.appliance.client import ServerGone, connect
    from cs2sim.system.store import default_home

    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    home = default_home()
    try:
        if args.command == "serve":
            return _serve(home, args)
        if args.command == "start":
            try:
                connect(home).close()
                print(f"A cluster server already runs for {home}.")
                return 0
            except ServerGone:
                pass
            from cs2sim.system.appliance.address import server_dir

            home.mkdir(parents=True, exist_ok=True, mode=0o700)
            log = open(server_dir(home) / "server.log", "ab")  # noqa: SIM115
            extra = [
                f"--{k}={v}"
                for k, v in (("tcp", args.tcp), ("cert", args.cert), ("key", args.key))
                if v
            ] + (["--auto"] if args.auto else [])
            subprocess.Popen(
                [sys.executable, "-m", "cs2sim.scripts.cluster_server", "serve", *extra],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                env=dict(os.environ),
            )
            log.close()
            deadline = time.monotonic() + 15
            while True:
                try:
                    conn = connect(home)
                    pid = conn.call("ping")["pid"]
                    conn.close()
                    print(f"The cluster server for {home} is running (pid {pid}).")
                    return 0
                except ServerGone:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        conn = connect(home)
        if args.command == "token":
            from cs2sim.system.appliance.tls import token_path

            token = conn.call("token")["token"]
            path = token_path()
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(token + "\n")
            os.replace(tmp, path)
            print(f"Your token for the cluster server's TCP address is in {path} (0600).")
            return 0
        if args.command == "status":
            info = conn.call("ping")
            print(
                f"The cluster server for {home} is running (pid {info['pid']}, version "
                f"{info['version']}); you are {info['user']}"
                f"{' (admin)' if info['admin'] else ''}."
            )
            return 0
        conn.call("shutdown")
        print(f"The cluster server for {home} is stopping; its running jobs are stopped.")
        return 0
    except ServerGone as e:
        if args.command == "stop":
            print(f"No cluster server runs for {home}.")
            return 0
        sys.stderr.write(f"error: {e}\n")
        return e.exit_code
    except CsError as e:
        sys.stderr.write(f"error: {e}\n")
        return e.exit_code


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
