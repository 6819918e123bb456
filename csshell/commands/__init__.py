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
from cs2sim.csshell.commands.jobinfo import jobs_log
from cs2sim.csshell.commands.jobs import jobs_cancel, jobs_show
from cs2sim.csshell.commands.shell import exit_cmd, help_cmd, history_cmd
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
    "Also with jobs running: they stop at their next step (checkpoints written are kept).",
)
MODE_WORDS = ("pipelined", "weight-streaming")
PASSWORD_FILE = Option(
    "--password-file",
    "Read the password from the first line of FILE (mode 0600).",
    metavar="FILE",
    exact=True,  # `--password x` must not be taken as `--password-file x`
    live="path",
)
MODE = Arg(
    "mode",
    "The mode to configure; without it a menu asks.",
    choices=("pipelined", "weight-streaming"),
    strict=False,
)
NAME = Arg("name", "The account name.", required=True, live="user")

# Summaries of the words that only group commands.
GROUPS: dict[str, str] = {
    "config": "Configure the system.",
    "config execmode": "Show or change the execution mode.",
    "system": "Show the systems or change a system's state.",
    "software": "Show the installed software.",
    "audit": "Show who did what, when.",
    "user": "Manage accounts and passwords.",
    "jobs": "Show, follow or cancel launches on the support cluster.",
}

ROWS: tuple[Command, ...] = (
    Command(
        "config execmode show",
        "Show the configured execution mode.",
        execmode_show,
        options=(FORMAT,),
        pages=True,
    ),
    Command(
        "config execmode setup",
        "Choose the execution mode (STANDBY only; admin).",
        execmode_setup,
        args=(MODE,),
        options=(Option("--yes", "Replace another admin's pending choice without asking."),),
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
        pages=True,
    ),
    Command(
        "system status",
        "Show the system's state (same as `system show`).",
        system_show,
        options=(FORMAT,),
        pages=True,
    ),
    Command(
        "system list",
        "List every CS-2 system of the cluster: state, modes and the job on it.",
        system_list,
        options=(FORMAT,),
        pages=True,
    ),
    Command(
        "system use",
        "Act on another CS-2 system from now on (as `cs --system NAME`).",
        system_use,
        args=(
            Arg(
                "name",
                "The system's name or IP, as `system list` shows them.",
                required=True,
                live="system",
            ),
        ),
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
        pages=True,
    ),
    Command(
        "audit show",
        "Show the audit log: who did what, when (filters: user, command, outcome, time).",
        audit_show,
        options=(
            Option("--last", "How many entries, the newest (default 20).", metavar="N"),
            Option("--all", "Every matching entry."),
            Option("--user", "Only this account's entries.", metavar="NAME", live="user"),
            Option(
                "--command",
                "Only entries whose command has these words (`standby`).",
                metavar="WORDS",
            ),
            Option(
                "--outcome",
                "Only entries that ended so.",
                choices=("ok", "refused", "denied", "failed"),
            ),
            Option(
                "--since",
                "From this time on: a duration back (30m, 1h, 2d) or a time "
                "(10:00, 2026-11-26 10:00).",
                metavar="TIME",
            ),
            Option("--until", "Before this time (same forms as --since).", metavar="TIME"),
            Option(
                "--system",
                "This system's entries (name or IP), or `all` systems (default: the current one).",
                metavar="NAME",
                live="system",
                also=("all",),
            ),
            FORMAT,
        ),
        pages=True,
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
    Command("user list", "List the accounts.", user_list, options=(FORMAT,), pages=True),
    Command(
        "user passwd",
        "Set a password (your own, or anyone's as admin).",
        user_passwd,
        args=(Arg("name", "The account (default: you).", live="user"),),
        options=(PASSWORD_FILE,),
    ),
    Command("user remove", "Delete an account (admin).", user_remove, args=(NAME,)),
    Command(
        "jobs show",
        "Show the launch queue, squeue-style (--all: ended jobs too), or one job in detail.",
        jobs_show,
        args=(Arg("id", "A job id: show everything about that job.", live="job"),),
        options=(
            Option("--watch", "Redraw the queue every 2 s until Ctrl-C."),
            Option("--all", "Also show jobs that have ended (most recent first)."),
            Option(
                "--limit",
                "Show at most N jobs (default: all in the console, paged; 200 in scripts; 0: all).",
                metavar="N",
            ),
            FORMAT,
        ),
        pages=True,
    ),
    Command(
        "jobs cancel",
        "Cancel a queued or running launch (its owner or an admin).",
        jobs_cancel,
        args=(
            Arg(
                "id",
                "The job id from `jobs show` or `system show` (12 or 12+0).",
                required=True,
                live="job",
            ),
        ),
    ),
    Command(
        "jobs log",
        "Print a job's task logs ($CS2_HOME/slurm/<job>/task-<K>.log).",
        jobs_log,
        args=(Arg("id", "The job id (from `jobs show`).", required=True, live="job"),),
        options=(
            Option("--task", "Only task K's log (its SLURM_PROCID; 0 is the chief).", metavar="K"),
            Option("--tail", "Only the last N lines of each log.", metavar="N"),
            Option(
                "--follow",
                "Keep printing what is appended until the job ends (Ctrl-C stops following).",
            ),
        ),
        pages=True,
    ),
    Command(
        "help",
        "Show the commands, or help for the given words.",
        help_cmd,
        args=(Arg("command", "Words of a command, e.g. `config execmode`.", tree=True),),
        pages=True,
    ),
    Command(
        "history",
        "Show the commands you typed in the console (this account, this OS user).",
        history_cmd,
        options=(Option("--last", "Only the last N commands.", metavar="N"), FORMAT),
        pages=True,
    ),
    Command("exit", "Leave the shell (also `quit` or Ctrl-D).", exit_cmd, exact=True),
    Command("quit", "Leave the shell (also `exit` or Ctrl-D).", exit_cmd, exact=True),
)

COMMANDS = CommandTable(ROWS, GROUPS)
