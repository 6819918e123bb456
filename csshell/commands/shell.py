"""`help`, `?` and `exit`: the shell's own commands, all read from the command table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from cs2sim.csshell.context import ExitShell

if TYPE_CHECKING:
    from cs2sim.csshell.context import Context
    from cs2sim.csshell.table import CommandTable, Invocation, Live

__all__ = ["help_cmd", "history_cmd", "exit_cmd", "columns", "question_help", "HELP_HEADER"]

HELP_HEADER = (
    "Commands (any word may be shortened to a unique prefix, e.g. `conf exec sh`; "
    "`?` lists what can follow; Tab completes):"
)


MAX_FIRST_COLUMN = 60  # a longer usage (`audit show` and its filters) puts its summary below


def columns(rows: Sequence[tuple[str, str]], indent: int = 2) -> list[str]:
    """Two aligned columns of plain text; a first cell wider than MAX_FIRST_COLUMN gets its
    second cell on the next line, in the second column, so one long usage does not push every
    summary far to the right."""
    width = max((len(a) for a, _ in rows if len(a) <= MAX_FIRST_COLUMN), default=0)
    lines = []
    for a, b in rows:
        if len(a) > width:
            lines.append(f"{' ' * indent}{a}")
            lines.append(f"{' ' * (indent + width)}  {b}".rstrip())
        else:
            lines.append(f"{' ' * indent}{a:<{width}}  {b}".rstrip())
    return lines


def help_cmd(ctx: Context, inv: Invocation) -> None:
    """All commands, or the commands under the given words, with usage and summary."""
    table = ctx.table
    words = inv.args.get("command", "").split()
    node, rest = table.walk(words)
    if rest:
        table.match(node, rest[0])  # raises the unknown/ambiguous error for the first bad word
    if node is table.root:
        ctx.echo(HELP_HEADER)
    elif node.command is not None:
        command = node.command
        ctx.echo(f"{command.usage}")
        ctx.echo(f"  {command.summary}")
        params = [(a.usage, a.summary) for a in command.args]
        params += [(o.usage, o.summary) for o in command.options]
        for line in columns(params, indent=4):
            ctx.echo(line)
        if not node.children:
            return
    else:
        ctx.echo(f"{' '.join(node.path)}: {node.summary}")
    for line in columns(table.help_rows(node)):
        ctx.echo(line)
    if node is table.root:  # the pipes, from their own table
        from cs2sim.csshell.pipes import PIPES

        names = ", ".join(f"`| {c.usage}`" for c in PIPES.commands())
        ctx.echo(f"After any command: {names} (chain them; `| ?` lists them).")


def history_cmd(ctx: Context, inv: Invocation) -> None:
    """The commands this account typed in the console (this OS user's file), numbered."""
    from cs2sim.csshell.history import history_path, read_history
    from cs2sim.system.errors import UsageError

    commands = read_history(history_path(ctx.store.home, ctx.identity.name))
    raw = inv.option("last")
    if raw is not None:
        if not (raw.isascii() and raw.isdigit() and int(raw) > 0):
            raise UsageError(f"`--last {raw}`: give a number of commands, e.g. --last 20.")
        start = max(0, len(commands) - int(raw))
    else:
        start = 0
    if inv.option("output_format") == "json":
        import json

        ctx.echo(json.dumps(commands[start:]), wrap=False)
        return
    if not commands:
        ctx.echo("No saved commands yet (the interactive console saves what you type).")
        return
    width = len(str(len(commands)))
    for number, command in enumerate(commands[start:], start=start + 1):
        ctx.echo(f"{number:>{width}}  {command}")


def exit_cmd(ctx: Context, inv: Invocation) -> None:
    """Leave the shell."""
    raise ExitShell()


def question_help(table: CommandTable, text: str, live: Live | None = None) -> list[str]:
    """What `?` prints for the line `text` (the part before the `?`): for the last command of
    a `;` line, or for its last pipe after a `|` (then from the pipes' table)."""
    from cs2sim.csshell.lexer import cursor_at_end
    from cs2sim.csshell.pipes import PIPES

    cursor = cursor_at_end(text)
    if cursor.stage:
        table = PIPES
    words, partial = cursor.words, cursor.partial
    rows = [(s.display, s.summary) for s in table.suggest(words, partial, live)]
    if not rows:
        where = " ".join(words) or ("`|`" if cursor.stage else "the top level")
        what = "pipe" if cursor.stage else "command"
        return [f"  no {what} starts with `{partial}` at {where}."]
    return columns(rows)
