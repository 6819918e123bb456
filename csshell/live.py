"""Live names for Tab: the values that exist now, read from the store when Tab is pressed.

The command table marks which arguments and options name a system, a job, an account or a
file (`live=` in csshell/commands/__init__.py); this module answers "which ones start with
what was typed", each with a description for the completion menu (a job: its user and
command). A store that cannot be read just means nothing to offer.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cs2sim.system.store import Store

__all__ = ["LiveNames", "MAX_OFFERED"]

MAX_OFFERED = 50  # a menu longer than this is no help; type more characters
DESCRIPTION_WIDTH = 60


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= DESCRIPTION_WIDTH else text[: DESCRIPTION_WIDTH - 1] + "…"


def _id(job: Any) -> int:
    return int(job.id)


class LiveNames:
    """A `Live` source (csshell/table.py) over one store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def __call__(self, kind: str, partial: str) -> list[tuple[str, str]]:
        try:
            found = getattr(self, f"_{kind}")(partial)
        except Exception:  # noqa: BLE001 - completion never breaks the prompt; Enter reports real errors
            return []
        return list(found[:MAX_OFFERED])

    def _system(self, partial: str) -> list[tuple[str, str]]:
        from cs2sim.system.machine import Machine, list_systems

        found = []
        for name in list_systems(self.store):
            if name.startswith(partial):
                status = Machine(self.store, name).status()
                found.append((name, f"{status.ip}, {status.state}, {status.active_mode}"))
        return found

    def _job(self, partial: str) -> list[tuple[str, str]]:
        """Every job whose id starts with what was typed (`4` -> 4, 40-49, 400-...), in id
        order: the whole queue is read (with --all), then filtered, so an old job completes
        as well as a new one."""
        from cs2sim.system.sched.queue import listing

        shown = listing(self.store, all_states=True, limit=None)
        jobs = sorted((job for job in shown.jobs if str(job.id).startswith(partial)), key=_id)
        return [
            (str(job.id), _short(f"{job.state.lower()}, {job.user}: {job.command}"))
            for job in jobs[:MAX_OFFERED]
        ]

    def _user(self, partial: str) -> list[tuple[str, str]]:
        from cs2sim.system.users import list_users

        return [
            (name, str(role))
            for name, role, _ in list_users(self.store)
            if name.startswith(partial)
        ]

    def _path(self, partial: str) -> list[tuple[str, str]]:
        folder, _, start = partial.rpartition("/")
        where = os.path.expanduser(folder + "/" if folder or partial.startswith("/") else ".")
        found = []
        with os.scandir(where) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if not entry.name.startswith(start) or (entry.name[0] == "." and not start):
                    continue
                value = (folder + "/" if folder or partial.startswith("/") else "") + entry.name
                is_dir = entry.is_dir()
                found.append((value + ("/" if is_dir else ""), "folder" if is_dir else "file"))
        return found
