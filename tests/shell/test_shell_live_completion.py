"""Tab on live names: systems (`system use`, `audit show --system`), job ids with their user and
command (`jobs cancel`), accounts (`user remove`, `audit show --user`), files (--password-file);
in process through the completer, and through the console's Tab key (the shell's prompt
session on a pipe input)."""

from __future__ import annotations

from pathlib import Path

from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from shell_helpers import MENU_OPEN, console, make_context, out

from cs2sim.csshell.commands import COMMANDS
from cs2sim.csshell.commands.shell import question_help
from cs2sim.csshell.completion import TableCompleter
from cs2sim.csshell.live import LiveNames
from cs2sim.system import users
from cs2sim.system.cluster import EXAMPLE_PATH
from cs2sim.system.sched import queue
from cs2sim.system.sched.request import Component, JobRequest
from cs2sim.system.store import Store


def _four(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "cluster.yaml").write_text(EXAMPLE_PATH.read_text())


def offered(store: Store, text: str) -> dict[str, str]:
    doc = Document(text, len(text))
    completer = TableCompleter(COMMANDS, LiveNames(store))
    return {c.text: c.display_meta_text for c in completer.get_completions(doc, CompleteEvent())}


def test_system_names_complete(home: Path) -> None:
    _four(home)
    store = Store.open(home)
    try:
        assert sorted(offered(store, "system use ")) == ["cs2-1 ", "cs2-2 ", "cs2-3 ", "cs2-4 "]
        assert list(offered(store, "system use cs2-3")) == ["cs2-3 "]
        assert "127.0.1.3" in offered(store, "system use cs2-3")["cs2-3 "]
        assert "cs2-2 " in offered(store, "audit show --system ")
    finally:
        store.close()


def test_job_ids_complete_with_user_and_command(store: Store) -> None:
    nodes = queue.cluster_nodes(store)
    whole = JobRequest((Component(len(nodes), 1, 1),), ("python", "run.py", "CSX"), name="big")
    running = queue.submit(store, whole, user="alice", nodes=nodes)
    pending = queue.submit(store, whole, user="bob", nodes=nodes)
    menu = offered(store, "jobs cancel ")
    assert set(menu) >= {f"{running} ", f"{pending} "}
    assert "alice" in menu[f"{running} "] and "python run.py CSX" in menu[f"{running} "]
    assert "bob" in menu[f"{pending} "] and "pending" in menu[f"{pending} "]
    rows = "\n".join(question_help(COMMANDS, "jobs cancel ", LiveNames(store)))
    assert f"{pending}" in rows and "bob" in rows  # `?` lists them too


def test_user_names_complete(store: Store) -> None:
    ctx = make_context(store)
    users.add_user(store, ctx.identity, "mallory", users.Role.USER, "a long password 1")
    users.add_user(store, ctx.identity, "marvin", users.Role.ADMIN, "a long password 2")
    assert sorted(offered(store, "user remove ma")) == ["mallory ", "marvin "]
    assert offered(store, "user remove mar") == {"marvin ": "admin"}
    assert "mallory " in offered(store, "audit show --user ")


def test_paths_complete_for_password_file(store: Store, tmp_path: Path) -> None:
    (tmp_path / "secret.pw").write_text("x")
    (tmp_path / "sub").mkdir()
    menu = offered(store, f"user add bob --password-file {tmp_path}/s")
    assert set(menu) == {f"{tmp_path}/secret.pw ", f"{tmp_path}/sub/"}  # a folder: go on typing


def test_tab_completes_live_names_at_the_console(store: Store) -> None:
    _four(store.home)
    steps = [
        ("system use cs2-", "system use cs2-"),
        ("\t", MENU_OPEN),  # cs2-1..4: nothing common to add, the menu opens
        ("\t", "system use cs2-1 "),  # a second Tab takes its first row
        ("\x03", ""),  # drop the line
        ("user remove ro\t", "user remove root "),
        ("?\x03", None),
    ]
    code, ctx = console(store, steps, history=False)
    assert code == 0
    assert out(ctx).splitlines()[0] == "cs> user remove root ?"
