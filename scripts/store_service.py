"""`cs-store`: share a system store with an OS group through its store service.

    cs-store share [GROUP]   (the store's owner) the database private to the owner, the
                             directory 0750 in GROUP (default: its group), the service started
    cs-store status          whether the service of $CS2_HOME answers, and who you are to it
                             (never starts it)
    cs-store stop            (the owner) stop the service (the next `cs` of the owner restarts
                             it while the store is shared)
    cs-store unshare         (the owner) stop the service and make the store private again
    cs-store serve HOME      run the service in the foreground (what `share` starts, detached)

Exit codes: 0 done; 1 an error (one sentence); 2 a usage error; 77 not permitted (a member
asking to stop or unshare, or a store the OS refuses you). docs/security.md explains the design.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cs2sim.system.errors import CsError

__all__ = ["main"]

USAGE = "usage: cs-store share [GROUP] | status | stop | unshare | serve HOME\n"


def _status(home: object) -> str:
    """What `cs-store status` says; connects to a running service, never starts one."""
    import os
    from pathlib import Path

    from cs2sim.system import store_service as svc
    from cs2sim.system.store import DB_NAME, Store
    from cs2sim.system.store_remote import running

    home = Path(str(home))
    db = home / DB_NAME
    try:
        owner = db.stat().st_uid
    except OSError:
        owner = os.getuid()
    if owner == os.getuid() or os.getuid() == 0:  # root opens any store itself
        if svc.is_shared(home):
            state = "running" if running(home) else "not running"
            return f"Shared store {home}: you own it; its service is {state}."
        return f"Private store {home}: only you use it (no service)."
    store = Store.open(home)  # a member's: connects to the running service, or says it is not
    try:
        assert store.remote is not None
        name, role = store.remote.identity
        return f"Shared store {home}: served by its owner's store service; you are {name} ({role})."
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    """The cs-store command line."""
    from cs2sim.system import store_service as svc
    from cs2sim.system.store import Store, default_home

    argv = sys.argv[1:] if argv is None else argv
    word = argv[0] if argv else "status"
    home = default_home()
    try:
        if word == "serve" and len(argv) == 2:
            svc.serve(Path(argv[1]))
            return 0
        if word == "share" and len(argv) <= 2:
            Store.open(home, serve=False).close()  # creates it first if need be
            group = svc.share(home, argv[1] if len(argv) == 2 else None)
            print(
                f"The system store in {home} is shared with group {group} through its store "
                "service; members set CS2_HOME to it."
            )
            return 0
        if word == "status" and len(argv) == 1:
            print(_status(home))
            return 0
        if word == "stop" and len(argv) == 1:
            was = svc.stop(home)
            print(
                f"The store service of {home} is stopped."
                if was
                else f"The store service of {home} was not running."
            )
            return 0
        if word == "unshare" and len(argv) == 1:
            svc.unshare(home)
            print(
                f"The system store in {home} is private again (its service stopped, the "
                "directory 0700); members can no longer use it."
            )
            return 0
    except CsError as e:
        sys.stderr.write(f"error: {e}\n")
        return e.exit_code
    except (KeyError, OSError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        sys.stderr.write(
            f"error: cs-store {word}: {why}; check the group name and that you own {home}.\n"
        )
        return 77 if isinstance(e, PermissionError) else 1
    sys.stderr.write(USAGE)
    return 2


if __name__ == "__main__":
    sys.exit(main())
