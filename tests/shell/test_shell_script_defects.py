"""What a script (or a person) met and should not have: a new store called damaged, job-id
completion limited to the newest jobs, `| display json` acting away from where it sits, -c
unlike -f, exit codes outside the documented scheme, a stray `q` ending the session, and the
smaller items each with its test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest
from prompt_toolkit.application import create_app_session
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from prompt_toolkit.input import PipeInput, create_pipe_input
from prompt_toolkit.output import DummyOutput
from shell_helpers import err, make_context, out, plain, shell_env

from cs2sim.csshell.commands import COMMANDS
from cs2sim.csshell.completion import TableCompleter
from cs2sim.csshell.dispatch import run_line
from cs2sim.csshell.live import LiveNames
from cs2sim.csshell.main import main
from cs2sim.csshell.prompts import TerminalPrompter
from cs2sim.csshell.repl import make_session, prompt_loop
from cs2sim.system.machine import Machine
from cs2sim.system.sched import queue
from cs2sim.system.sched.request import Component, JobRequest
from cs2sim.system.state import ExecMode
from cs2sim.system.store import Store

SMALL = JobRequest((Component(1, 1, 1),), ("python", "run.py", "CSX"), name="small")


def cs(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- a new store -------------------------------------------------------------------------------
@pytest.mark.parametrize("line", ["jobs show 1", "jobs log 1", "jobs show 1 --output-format=json"])
def test_a_new_store_answers_no_such_job_not_cannot_read(
    home: Path, capsys: pytest.CaptureFixture[str], line: str
) -> None:
    code, _, first = cs(capsys, "-c", line)
    assert code == 1 and "cannot read" not in first and "No job 1" in first, first
    assert cs(capsys, "-c", "jobs show --all")[0] == 0
    again = cs(capsys, "-c", line)
    assert again[0] == 1 and again[2] == first  # the same answer before and after a listing


def test_a_new_store_lists_empty_answers(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for line, answer in (
        ("jobs show", "No jobs in the queue.\n"),
        ("jobs show --all --output-format=json", "[]\n"),
        ("audit show", "The audit log is empty.\n"),
    ):
        assert cs(capsys, "-c", line) == (0, answer, "")


# -- job-id completion -------------------------------------------------------------------------
def test_job_ids_complete_over_every_job_by_the_typed_prefix(store: Store) -> None:
    nodes = queue.cluster_nodes(store)
    ids = [queue.submit(store, SMALL, user="root", nodes=nodes) for _ in range(116)]
    assert ids == list(range(1, 117))
    completer = TableCompleter(COMMANDS, LiveNames(store))

    def offered(text: str) -> list[str]:
        doc = Document(text, len(text))
        return [c.text.strip() for c in completer.get_completions(doc, CompleteEvent())]

    assert offered("jobs log 4") == ["4", *map(str, range(40, 50))]
    assert offered("jobs show 1") == ["1", *map(str, range(10, 20)), *map(str, range(100, 117))]
    assert offered("jobs cancel 116") == ["116"]


# -- pipes ---------------------------------------------------------------------------------------
def test_display_json_acts_where_it_sits(store: Store) -> None:
    import json

    ctx = make_context(store)
    assert run_line(ctx, "system show | match State | display json") == 0
    [line] = json.loads(out(ctx))
    assert line.startswith("State") and "ACTIVE" in line
    ctx = make_context(store)
    assert run_line(ctx, "system show | display json | count") == 0
    assert out(ctx) == "Count: 1 line\n"  # the command's own JSON: one line
    ctx = make_context(store)
    assert run_line(ctx, "system show | count | display json") == 0
    assert json.loads(out(ctx))[0].startswith("Count: ")


# -- -c like -f ----------------------------------------------------------------------------------
def test_c_takes_a_trailing_comment_as_f_does(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, text, _ = cs(capsys, "-c", "config execmode show  # what is configured")
    assert (code, text) == (0, "Configured Execution Mode : PIPELINED\n")


def test_a_multi_line_c_error_names_its_line(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, error = cs(capsys, "-c", "config execmode show\n# a comment\nsytem show")
    assert code == 2 and error.startswith("error: -c line 3: there is no command `sytem`")


def test_a_quoted_pipe_given_as_words_suggests_c(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, error = cs(capsys, "system", "show", "|", "match", "X")
    assert code == 2
    assert "give the whole line with -c: cs -c 'system show | match X'" in error


def test_a_byte_order_mark_in_f_is_dropped(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "windows.cs"
    script.write_bytes(b"\xef\xbb\xbfconfig execmode show\r\n")
    code, text, error = cs(capsys, "-f", str(script))
    assert (code, text, error) == (0, "Configured Execution Mode : PIPELINED\n", "")


# -- exit codes and views ------------------------------------------------------------------------
def test_cancelling_an_ended_job_is_refused_with_exit_1(store: Store) -> None:
    job = queue.submit(store, SMALL, user="root", nodes=queue.cluster_nodes(store))
    assert run_line(make_context(store), f"jobs cancel {job}") == 0
    ctx = make_context(store)
    assert run_line(ctx, f"jobs cancel {job}") == 1
    assert err(ctx) == f"error: Job {job} has already ended (CANCELLED); nothing to cancel.\n"


def test_cancelling_an_ended_job_started_without_a_launcher_exits_1(store: Store) -> None:
    """A run started by hand (`run.py --cs_ip`) has a system job id, not a queue entry."""
    ctx = make_context(store)
    machine = Machine(store)
    job = machine.register_job(ctx.identity, ExecMode.PIPELINED, "python run.py", os.getpid())
    machine.finish_job(job.id, "COMPLETED")
    assert run_line(ctx, f"jobs cancel {job.id}") == 1
    assert "has already ended (COMPLETED); nothing to cancel." in err(ctx)


def test_ctrl_c_ends_jobs_show_watch_with_130(home: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "cs2sim.csshell", "-c", "jobs show --watch"],
        env=shell_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("Every 2 s: jobs show")  # it is watching
    os.kill(proc.pid, signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert rest.rstrip().endswith("Stopped watching.")


def test_forced_standby_lists_a_jobs_nodes_as_system_show_does(store: Store) -> None:
    nodes = queue.cluster_nodes(store)
    req = JobRequest((Component(1, 1, 1), Component(2, 1, 1)), ("python", "run.py", "CSX"))
    qid = queue.submit(store, req, user="root", nodes=nodes)
    placed = ",".join(n for part in queue.state(store, qid).nodes for n in part)
    ctx = make_context(store)
    Machine(store).register_job(
        ctx.identity, ExecMode.PIPELINED, "python run.py CSX", os.getpid(), job_id=qid
    )
    assert run_line(ctx, "system show | match python") == 0
    assert placed in out(ctx)
    ctx = make_context(store)
    assert run_line(ctx, "system standby --force --yes") == 0
    listed = [line for line in out(ctx).splitlines() if "python run.py CSX" in line]
    assert len(listed) == 1 and placed in listed[0], out(ctx)


# -- minor ---------------------------------------------------------------------------------------
@pytest.fixture
def pipe() -> Iterator[PipeInput]:
    with create_pipe_input() as inp, create_app_session(input=inp, output=DummyOutput()):
        yield inp


def test_a_stray_q_does_not_end_the_session(store: Store, pipe: PipeInput) -> None:
    ctx = make_context(store, prompter=TerminalPrompter(), interactive=True)
    pipe.send_text("q\rex\rconfig execmode show\rquit\rsoftware show\r")
    pipe.close()
    assert prompt_loop(ctx, make_session(ctx, None)) == 0
    assert out(ctx) == "Configured Execution Mode : PIPELINED\n"  # ran; `quit` then ended it
    assert "type `quit` in full" in err(ctx) and "type `exit` in full" in err(ctx)


def test_a_component_id_beyond_the_job_is_refused(store: Store) -> None:
    job = queue.submit(store, SMALL, user="root", nodes=queue.cluster_nodes(store))
    ctx = make_context(store)
    assert run_line(ctx, f"jobs show {job}+5") == 1
    assert err(ctx).startswith(f"error: No job {job}+5: job {job} has 1 component(s)")
    assert run_line(make_context(store), f"jobs show {job}+0") == 0


def test_audit_system_offers_all(store: Store) -> None:
    completer = TableCompleter(COMMANDS, LiveNames(store))
    doc = Document("audit show --system ", 20)
    texts = [c.text for c in completer.get_completions(doc, CompleteEvent())]
    assert "all " in texts and "cs2-1 " in texts


def test_a_reversed_time_window_is_refused_in_one_sentence(store: Store) -> None:
    ctx = make_context(store)
    assert run_line(ctx, "audit show --since 5m --until 10m") == 2
    message = err(ctx)
    assert message.count("\n") == 1 and "`--since 5m` is later than `--until 10m`" in message


def test_one_older_entry_is_singular(store: Store) -> None:
    assert run_line(make_context(store), "system fault a; system standby --yes") == 0
    ctx = make_context(store)
    assert run_line(ctx, "audit show --last 1") == 0
    assert out(ctx).splitlines()[-1].startswith("... and 1 older matching entry not shown")


def test_tables_stay_tables_under_term_dumb_when_wide_enough(home: Path) -> None:
    env = dict(shell_env(home), TERM="dumb")
    child = pexpect.spawn(
        sys.executable,
        ["-m", "cs2sim.csshell"],
        env=env,
        encoding="utf-8",
        timeout=30,
        dimensions=(50, 160),
    )
    child.delaybeforesend = None
    try:
        child.expect_exact("cs> ")
        child.sendline("system fault fan 3 stopped")
        child.expect_exact("cs> ")
        child.sendline("audit show | no-more")
        child.expect_exact("cs> ")
        shown = plain(str(child.before))
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert "───" in shown and "outcome : ok" not in shown, shown
    assert any(line.startswith("1 ") and "fan 3 stopped" in line for line in shown.splitlines())
