"""`software show`, `audit show` and the `user` accounts commands."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cs2sim.csshell.login import read_password_file
from cs2sim.csshell.render import clock, kv_lines, short_clock
from cs2sim.system.errors import UsageError

if TYPE_CHECKING:
    from cs2sim.csshell.context import Context
    from cs2sim.csshell.table import Invocation

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


def audit_show(ctx: Context, inv: Invocation) -> None:
    """The newest audit entries, oldest first."""
    raw = inv.option("last", str(AUDIT_DEFAULT_LAST))
    last = int(raw) if raw.isascii() and raw.isdigit() else 0  # isdigit() alone takes "²"
    if last < 1:
        raise UsageError(
            f"`--last` must be a whole number of entries, not `{raw}`; e.g. --last 20."
        )
    entries = ctx.machine.audit(last=last)
    if inv.option("output_format") == "json":
        import dataclasses
        import json

        ctx.echo(json.dumps([dataclasses.asdict(e) for e in entries]), wrap=False)
        return
    if not entries:
        ctx.echo("The audit log is empty.")
        return
    rows: list[tuple[object, ...]] = [
        (
            e.id,
            short_clock(e.at),
            e.user,
            e.command,
            _change(e.from_state, e.to_state),
            e.outcome,
            e.detail,
        )
        for e in entries
    ]
    if ctx.machine.several:  # this system's rows and the cluster-wide ones: say which is which
        rows = [(*r[:3], e.system or "-", *r[3:]) for r, e in zip(rows, entries, strict=True)]
        ctx.table_out((*AUDIT_COLUMNS[:3], "system", *AUDIT_COLUMNS[3:]), rows)
        return
    ctx.table_out(AUDIT_COLUMNS, rows)


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
    users.require_admin(ctx.store, ctx.identity, f"user add {name}")  # before asking a password
    users.check_name(name)
    users.add_user(ctx.store, ctx.identity, name, role, _new_password(ctx, inv, name, "user add"))
    ctx.echo(f"User {name} added with role {role}.")


def user_list(ctx: Context, inv: Invocation) -> None:
    """The accounts (name, role, created)."""
    from cs2sim.system import users

    rows = [(name, role, clock(created)) for name, role, created in users.list_users(ctx.store)]
    me = ctx.identity
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
