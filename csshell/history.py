"""The console's command history: where it is kept and how `history` reads it back.

One file per (OS user, account), `$CS2_HOME/histories/<os user>/<account>`, mode 0600 in a 0700
directory, written by the interactive shell (prompt_toolkit's FileHistory format: a `# date`
line, then the command as `+` lines)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["HISTORY_DIR", "history_path", "read_history", "MAX_HISTORY_BYTES"]

HISTORY_DIR = "histories"
MAX_HISTORY_BYTES = 4 * 2**20  # `history` reads at most the last 4 MiB of the file


def history_path(home: Path, account: str) -> Path:
    """Where the commands typed as `account` by this OS user are kept: one file per (OS user,
    account), `$CS2_HOME/histories/<os user>/<account>`, so a `user` account pressing Up never
    reads an administrator's commands, and one OS user never reads another's (the per-OS-user
    directory is 0700, the file 0600). The directories are made when the shell first saves."""
    from cs2sim.system.users import login_name

    return Path(home) / HISTORY_DIR / login_name() / account


def read_history(path: Path) -> list[str]:
    """The commands saved in `path`, oldest first ([] if there is no such file)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - MAX_HISTORY_BYTES))
            text = f.read().decode("utf-8", "replace")
    except (FileNotFoundError, NotADirectoryError):
        return []
    commands: list[list[str]] = []
    fresh = True
    for line in text.splitlines():
        if line.startswith("+"):
            if fresh:
                commands.append([])
                fresh = False
            commands[-1].append(line[1:])
        else:
            fresh = True
    return ["\n".join(c) for c in commands]
