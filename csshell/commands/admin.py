"""`software show`, `audit show` and the `user` accounts commands."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING

from cs2sim.csshell.login import read_password_file
from cs2sim.csshell.render import clock, kv_lines, short_clock
from cs2sim.system.errors import UsageError

if TYPE_CHECKING:
    from cs2sim.csshell.context import Context
    from cs2sim.csshell.table import Invocation
    from cs2sim.system.audit import AuditQuery

__all__ = ["software_show", "audit_show", "user_add", "user_list", "user_passwd", "user_remove"]

AUDIT_DEFAULT_LAST = 20
AUDIT_COLUMNS = ("#", "when", "user", "command", "state", "outcome", "detail")


def software_show(ctx: Context, inv: Invocation) -> None:
    """Component versions (firmware follows the active mode)."""
    versions = ctx.machine.software()
    if inv.option("output_format") == "json":
        import json

        ctx.echo(json.dumps(versions), wrap=False)
        return
    rows = list(versions.items())
    if ctx.machine.several:  # a cluster of several CS-2s: say whose firmware this is
        rows.insert(0, ("system", f"{ctx.machine.name} ({ctx.machine.ip})"))
    for line in kv_lines(rows):
        ctx.echo(line)


OUTCOME_WORDS = {
    "ok": "ok",
    "refused": "refused",
    "denied": "denied",
    "failed": "error",
    "error": "error",
}


def _audit_query(ctx: Context, inv: Invocation) -> AuditQuery:
    """The rows `audit show` asks for: its filters, and how many (default: the newest 20)."""
    from cs2sim.csshell.timespec import parse_moment
    from cs2sim.system.audit import AuditQuery

    raw = inv.option("last")
    if inv.option("all"):
        if raw is not None:
            raise UsageError("give `--last N` or `--all`, not both.")
        last = None
    else:
        raw = raw if raw is not None else str(AUDIT_DEFAULT_LAST)
        last = int(raw) if raw.isascii() and raw.isdigit() else 0  # isdigit() alone takes "²"
        if last < 1:
            raise UsageError(
                f"`--last` must be a whole number of entries, not `{raw}`; e.g. --last 20 "
                "(`--all` shows every entry)."
            )
    system = inv.option("system")
    if system is None:
        system = ctx.machine.name
    elif system == "all":
        system = None
    else:
        from cs2sim.csshell.context import find_machine

        system = find_machine(ctx.store, system).name
    raw_since, raw_until = inv.option("since"), inv.option("until")
    since = parse_moment(raw_since, "--since") if raw_since is not None else None
    until = parse_moment(raw_until, "--until") if raw_until is not None else None
    if since is not None and until is not None and since > until:
        raise UsageError(
            f"`--since {raw_since}` is later than `--until {raw_until}`, so nothing can match; "
            "give the earlier time to --since (durations count back from now)."
        )
    outcome = inv.option("outcome")
    return AuditQuery(
        user=inv.option("user"),
        command=inv.option("command"),
        outcome=OUTCOME_WORDS[outcome] if outcome is not None else None,
        since=since,
        until=until,
        system=system,
        last=last,
    )


def audit_show(ctx: Context, inv: Invocation) -> None:
    """The audit entries that match the filters (the newest 20 unless --last or --all), oldest
    first; a last line says how many older matching entries were left out. The text table is
    drawn as the rows are read (system/audit.py AuditRows), so a pipe or the pager gets the
    first rows at once and memory stays flat over any number of rows."""
    from cs2sim.system.audit import AuditRows, query

    q = _audit_query(ctx, inv)
    if inv.option("output_format") == "json":
        import dataclasses
        import json

        entries, total = query(ctx.store, q)
        ctx.echo(json.dumps([dataclasses.asdict(e) for e in entries]), wrap=False)
        if total - len(entries):
            ctx.warn(f"{older(total - len(entries))} not shown; `--all` lists them.")
        return
    # several systems' rows (a cluster, or --system all): a column says which is which
    several = ctx.machine.several or q.system is None  # asked before the rows hold the store
    found = AuditRows(ctx.store, q)
    shown = 0

    def rows() -> Iterator[tuple[object, ...]]:
        nonlocal shown
        for e in found:
            shown += 1
            yield (
                e.id,
                short_clock(e.at),
                e.user,
                *((e.system or "-",) if several else ()),
                e.command,
                _change(e.from_state, e.to_state),
                e.outcome,
                e.detail,
            )

    stream = rows()
    head = next(stream, None)
    if head is None:
        filtered = any(
            inv.option(k) is not None for k in ("user", "command", "outcome", "since", "until")
        )
        ctx.echo("No audit entries match." if filtered else "The audit log is empty.")
        return
    columns = (*AUDIT_COLUMNS[:3], "system", *AUDIT_COLUMNS[3:]) if several else AUDIT_COLUMNS
    ctx.table_out(columns, itertools.chain([head], stream))
    if found.total > shown:
        ctx.echo(
            f"... and {older(found.total - shown)} not shown; `--all` lists them (or `--last N`)."
        )


def older(n: int) -> str:
    """`1 older matching entry`, `2 older matching entries`."""
    return f"{n} older matching {'entry' if n == 1 else 'entries'}"


def _change(before: str, after: str) -> str:
    """`ACTIVE → STANDBY`, or the one state when nothing moved (`-` when not about a system)."""
    if not before and not after:
        return "-"
    return before if before == after else f"{before} → {after}"


def _new_password(ctx: Context, inv: Invocation, name: str, command: str) -> str:
    """From --password-file, else asked twice."""
    path = inv.option("password_file")
    if path is not None:
        return str(read_password_file(path))
    hint = f"add --password-file FILE (mode 0600) to `{command}`."
    first = ctx.prompter.secret(f"New password for {name}: ", hint)
    second = ctx.prompter.secret(f"Repeat the password for {name}: ", hint)
    if first != second:
        raise UsageError(f"the two passwords differ; run `{command}` again.")
    return str(first)


def user_add(ctx: Context, inv: Invocation) -> None:
    """Create an account (admin)."""
    from cs2sim.system import users

    name = inv.args["name"]
    role = users.Role(inv.option("role", "user"))
    # before asking a password; a denial is audited with the role that was asked for
    users.require_admin(ctx.store, ctx.identity, f"user add {name} --role {role}")
    users.check_name(name)
    users.add_user(ctx.store, ctx.identity, name, role, _new_password(ctx, inv, name, "user add"))
    ctx.echo(f"User {name} added with role {role}.")


def user_list(ctx: Context, inv: Invocation) -> None:
    """The accounts (name, role, created)."""
    from cs2sim.system import users

    accounts = users.list_users(ctx.store)
    me = ctx.identity
    if inv.option("output_format") == "json":
        import json

        ctx.echo(
            json.dumps(
                {
                    "users": [
                        {"name": name, "role": str(role), "created_at": created}
                        for name, role, created in accounts
                    ],
                    "you": {"name": me.name, "role": str(me.role), "via": str(me.via)},
                }
            ),
            wrap=False,
        )
        return
    rows = [(name, role, clock(created)) for name, role, created in accounts]
    ctx.table_out(("name", "role", "created"), rows)
    ctx.echo(f"You are {me.name} ({me.role}, {me.via}).")


def user_passwd(ctx: Context, inv: Invocation) -> None:
    """Set a password (admins: anyone's; users: their own)."""
    from cs2sim.system import users

    name = inv.args.get("name") or ctx.identity.name
    if name != ctx.identity.name:
        users.require_admin(ctx.store, ctx.identity, f"user passwd {name}")
    users.set_password(ctx.store, ctx.identity, name, _new_password(ctx, inv, name, "user passwd"))
    ctx.echo(f"Password of {name} changed.")


def user_remove(ctx: Context, inv: Invocation) -> None:
    """Delete an account (admin; never the last admin)."""
    from cs2sim.system import users

    name = inv.args["name"]
    users.remove_user(ctx.store, ctx.identity, name)
    ctx.echo(f"User {name} removed.")
