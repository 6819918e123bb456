"""The pager: output taller than the terminal is paged (less, or the built-in --More--), never
off a terminal, never with `| no-more`; `jobs show` in the console lists every job, paged."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from shell_helpers import Shell, shell_env

from cs2sim.csshell.pager import MORE, more, page


def test_more_shows_a_screen_then_waits() -> None:
    lines = [f"line {i}" for i in range(12)]
    out = io.StringIO()
    keys = iter([" ", "\r", "q"])
    more(lines, out, rows=5, key=lambda: next(keys))
    text = out.getvalue()
    shown = [x.strip() for x in text.replace(MORE, "").split("\n") if x.strip()]
    assert shown == lines[:4] + lines[4:8] + lines[8:9]  # a screen, a screen, a line, q
    assert text.count(MORE) == 3


def test_more_to_the_end_needs_no_key_after_the_last_screen() -> None:
    out = io.StringIO()
    keys = iter([" "])
    more([str(i) for i in range(6)], out, rows=5, key=lambda: next(keys))
    assert out.getvalue().count(MORE) == 1 and out.getvalue().endswith("5\n")


def test_what_fits_is_printed_as_is(tmp_path: Path) -> None:
    out = io.StringIO()
    page("a\nb\n", out, rows=10)  # no pager process, no key read
    assert out.getvalue() == "a\nb\n"


def spawn_small(home: Path, **env: str) -> Shell:
    sh = Shell(dict(shell_env(home), **env))
    sh.child.setwinsize(12, 160)
    sh.prompt()
    return sh


def test_help_pages_through_less_and_q_comes_back(home: Path) -> None:
    sh = spawn_small(home, PAGER="")
    try:
        sh.child.sendline("help")
        sh.expect("Commands (any word")
        sh.child.expect(r"\n:")  # less's prompt: the rest waits
        assert "Leave the shell (also `exit`" not in sh.child.before
        sh.send("q")
        sh.prompt()
        sh.child.sendline("help | no-more")  # the whole text, no pager
        sh.expect("Leave the shell (also `exit` or Ctrl-D).")
        sh.prompt()
    finally:
        sh.close()


def test_the_built_in_pager_without_less(home: Path) -> None:
    sh = spawn_small(home, PATH="/nonexistent", PAGER="")
    try:
        sh.child.sendline("help")
        sh.expect(MORE)
        sh.send(" ")
        sh.expect(MORE)
        sh.send("q")
        sh.prompt()
    finally:
        sh.close()


def test_no_pager_off_a_terminal(home: Path) -> None:
    env = dict(shell_env(home), PAGER="false")  # a pager that would swallow everything
    proc = subprocess.run(
        [sys.executable, "-m", "cs2sim.csshell", "help"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0
    assert MORE not in proc.stdout and "Leave the shell (also `exit`" in proc.stdout


def test_jobs_show_in_the_console_lists_every_job_through_the_pager(home: Path) -> None:
    from cs2sim.system.sched import queue
    from cs2sim.system.sched.request import Component, JobRequest
    from cs2sim.system.store import Store

    store = Store.open(home)
    try:
        nodes = queue.cluster_nodes(store)
        whole = JobRequest((Component(len(nodes), 1, 1),), ("python", "run.py"), name="big")
        for _ in range(230):  # more than the 200 a script gets by default
            queue.submit(store, whole, user="bob", nodes=nodes)
    finally:
        store.close()
    sh = spawn_small(home, PAGER="cat")  # a pager that prints everything: count the rows
    try:
        sh.child.sendline("jobs show")
        sh.child.expect(r"\n\s*230\s+big")  # the last job's row
        sh.prompt()
        assert "not shown" not in sh.child.before
    finally:
        sh.close()


def test_a_dumb_terminal_gets_the_built_in_pager(home: Path) -> None:
    sh = spawn_small(home, TERM="dumb", PAGER="")
    try:
        sh.child.sendline("help")
        sh.expect(MORE)
        sh.send("q")
        sh.prompt()
    finally:
        sh.close()
