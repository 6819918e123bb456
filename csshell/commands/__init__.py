"""COMMANDS: the one table of the cs> console.

Dispatch, Tab completion (summaries as menu meta text), `?` help, `help`, abbreviations,
ambiguity errors and "did you mean" are all computed from these rows by csshell/table.py, so they
cannot drift apart (tests/shell/test_shell_invariants.py checks it). To add a command, add a row.

Public record (Weight Streaming Quickstart, Section 1, and System_101.md; docs/sources.md):
`config execmode show|setup` (`withdraw` is ours), `system standby|activate`, `system show`,
`software show`, `--output-format=json`. The rest is our design.
"""

from __future__ import annotations

from cs2sim.csshell.commands.admin import (
    audit_show,
    software_show,
    user_add,
    user_list,
    user_passwd,
    user_remove,
)
from cs2sim.csshell.commands.execmode import execmode_setup, execmode_show, execmode_withdraw
from cs2sim.csshell.commands.jobs import jobs_cancel, jobs_show
from cs2sim.csshell.commands.shell import exit_cmd, help_cmd
from cs2sim.csshell.commands.system import (
    system_activate,
    system_fault,
    system_list,
    system_show,
    system_standby,
    system_use,
)
from cs2sim.csshell.table import Arg, Command, CommandTable, Option

__all__ = ["COMMANDS", "GROUPS", "ROWS"]

FORMAT = Option("--output-format", "Print as text (default) or JSON.", choices=("json", "text"))
YES = Option("--yes", "Answer yes to the confirmation (for scripts).")
FORCE = Option(
    "--force",
    "Also with jobs running: they stop at their next step (checkpoints written are kept)."
)
MODE_WORDS = ("pipelined", "weight-streaming")
PASSWORD_FILE = Option(
    "--password-file",
    "Read the password from the first line of FILE (mode 0600).",
    metavar="FILE",
    exact=True,  # `--password x` must not be taken as `--password-file x`
)
MODE = Arg(
    "mode",
    "The mode to configure; without it a menu asks.",
    choices=("pipelined", "weight-streaming"),
    strict=False,
)
NAME = Arg("name", "The account name.", required=True)

# Summaries of the words that only group commands.
GROUPS: dict[str, str] = {
    "config": "Configure the system.",
    "config execmode": "Show or change the execution mode.",
    "system": "Show the systems or change a system's state.",
    "software": "Show the installed software.",
    "audit": "Show who did what, when.",
    "user": "Manage accounts and passwords.",
    "jobs": "Show or cancel launches on the support cluster.",
}

ROWS: tuple[Command, ...] = (
    Command(
        "config execmode show",
        "Show the configured execution mode.",
        execmode_show,
        options=(FORMAT,),
    ),
    Command(
        "config execmode setup",
        "Choose the execution mode (STANDBY only; admin).",
        execmode_setup,
        args=(MODE,),
    ),
    Command(
        "config execmode withdraw",
        "Take back a pending mode change: configure the active mode again (STANDBY; admin).",
        execmode_withdraw,
    ),
    Command(
        "system show",
        "Show state, modes, running jobs and software version.",
        system_show,
        options=(FORMAT,),
    ),
    Command(
        "system status",
        "Show the system's state (same as `system show`).",
        system_show,
        options=(FORMAT,),
    ),
    Command(
        "system list",
        "List every CS-2 system of the cluster: state, modes and the job on it.",
        system_list,
        options=(FORMAT,),
    ),
    Command(
        "system use",
        "Act on another CS-2 system from now on (as `cs --system NAME`).",
        system_use,
        args=(Arg("name", "The system's name, as `system list` shows it.", required=True),),
    ),
    Command(
        "system standby",
        "Put the system in STANDBY, after asking (admin).",
        system_standby,
        options=(YES, FORCE),
    ),
    Command(
        "system activate",
        "Reboot into the configured mode and wait until ACTIVE (admin).",
        system_activate,
        options=(
            Option(
                "--expect-mode",
                "Refuse (nothing done) unless the configured mode is MODE (for scripts).",
                choices=MODE_WORDS,
            ),
        ),
    ),
    Command(
        "system fault",
        "Put the system in FAULT to rehearse a recovery (admin).",
        system_fault,
        args=(Arg("reason", "What failed, in words (e.g. `fan 3 stopped`).", rest=True),),
    ),
    Command(
        "software show",
        "Show the versions of the system software.",
        software_show,
        options=(FORMAT,),
    ),
    Command(
        "audit show",
        "Show the newest audit log entries.",
        audit_show,
        options=(Option("--last", "How many entries (default 20).", metavar="N"), FORMAT),
    ),
    Command(
        "user add",
        "Create an account (admin).",
        user_add,
        args=(NAME,),
        options=(
            Option("--role", "The account's role (default user).", choices=("user", "admin")),
            PASSWORD_FILE,
        ),
    ),
    Command("user list", "List the accounts.", user_list),
    Command(
        "user passwd",
        "Set a password (your own, or anyone's as admin).",
        user_passwd,
        args=(Arg("name", "The account (default: you)."),),
        options=(PASSWORD_FILE,),
    ),
    Command("user remove", "Delete an account (admin).", user_remove, args=(NAME,)),
    Command(
        "jobs show",
        "Show the launch queue, squeue-style (--all: ended jobs too).",
        jobs_show,
        options=(
            Option("--all", "Also show jobs that have ended (most recent first)."),
            Option("--limit", "Show at most N jobs (default 200; 0: all of them).", metavar="N"),
            FORMAT,
        ),
    ),
    Command(
        "jobs cancel",
        "Cancel a queued or running launch (its owner or an admin).",
        jobs_cancel,
        args=(
            Arg("id", "The job id from `jobs show` or `system show` (12 or 12+0).", required=True),
        ),
    ),
    Command(
        "help",
        "Show the commands, or help for the given words.",
        help_cmd,
        args=(Arg("command", "Words of a command, e.g. `config execmode`.", tree=True),),
    ),
    Command("exit", "Leave the shell (also `quit` or Ctrl-D).", exit_cmd),
    Command("quit", "Leave the shell (also `exit` or Ctrl-D).", exit_cmd),
)

COMMANDS = CommandTable(ROWS, GROUPS)
