"""`cs-store`: share a system store with an OS group through its store service.

    cs-store share [GROUP]   (the store's owner) the database private to the owner, the
                             directory 0750 in GROUP (default: its group), the service started
    cs-store status          whether the service of $CS2_HOME answers, and who you are to it
    cs-store stop            (the owner) stop the service (the next `cs` of the owner restarts
                             it while the store is shared)
    cs-store serve HOME      run the service in the foreground (what `share` starts, detached)

docs/security.md explains the design and its threat model.
"""

from __future__ import annotations

import os
import signal
import sys

from cs2sim.system.errors import CsError

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """The cs-store command line."""
    from cs2sim.system import store_service as svc
    from cs2sim.system.store import Store, default_home
    from cs2sim.system.store_remote import PID_NAME, running

    argv = sys.argv[1:] if argv is None else argv
    word = argv[0] if argv else "status"
    home = default_home()
    try:
        if word == "serve" and len(argv) == 2:
            svc.serve(argv[1])  # type: ignore[arg-type]
            return 0
        if word == "share" and len(argv) <= 2:
            Store.open(home, serve=False).close()  # creates it first if need be
            group = svc.share(home, argv[1] if len(argv) == 2 else None)
            print(f"The system store in {home} is shared with group {group} through its store "
                  "service; members set CS2_HOME to it.")
            return 0
        if word == "status" and len(argv) == 1:
            store = Store.open(home)
            if store.remote is not None:
                name, role = store.remote.identity  # type: ignore[attr-defined]
                print(f"Shared store {home}: served by its owner's store service; you are "
                      f"{name} ({role}).")
            elif svc.is_shared(home):
                print(f"Shared store {home}: you own it; its service is "
                      f"{'running' if running(home) else 'not running'}.")
            else:
                print(f"Private store {home}: only you use it (no service).")
            store.close()
            return 0
        if word == "stop" and len(argv) == 1:
            try:
                pid = int((home / PID_NAME).read_text())
                if running(home):
                    os.kill(pid, signal.SIGTERM)
            except (OSError, ValueError):
                pass
            print(f"The store service of {home} is stopped.")
            return 0
    except CsError as e:
        sys.stderr.write(f"error: {e}\n")
        return e.exit_code
    except (KeyError, PermissionError) as e:
        sys.stderr.write(f"error: cs-store {word}: {e}; check the group name and that you own "
                         f"{home}.\n")
        return 1
    sys.stderr.write("usage: cs-store share [GROUP] | status | stop | serve HOME\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
