"""Big outputs stream: a table's rows reach the pipes and the pager as they are read (not when
the command ends), and 100,000 audit rows go through `| count` and `| match` in a child whose
peak memory stays under a stated bound."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from shell_helpers import make_context, shell_env

from cs2sim.csshell.pager import MORE, PagerClosed, PagerStream
from cs2sim.csshell.rowlines import BLOCK, table_lines
from cs2sim.system import audit
from cs2sim.system.store import Store

COLUMNS = ("#", "user", "detail")


def rows_until(limit: int, seen: list[int]) -> Iterator[tuple[object, ...]]:
    for i in range(limit):
        seen.append(i)
        yield (i, "root", f"detail {i}")


def test_table_lines_yield_a_block_before_reading_the_next() -> None:
    seen: list[int] = []
    blocks = table_lines(COLUMNS, rows_until(3 * BLOCK, seen), None)
    head = next(blocks)
    assert head[0].split() == list(COLUMNS) and set(head[1]) == {"─"}
    first = next(blocks)
    assert len(first) == BLOCK and len(seen) == BLOCK  # nothing past the first block was read
    assert first[0] == "0     root   detail 0"  # `#` as wide as `499`, then three spaces


def test_columns_keep_the_first_blocks_widths_and_grow_after_it() -> None:
    rows = [(i, "u", "d") for i in range(BLOCK)] + [(10**9, "a-longer-user", "d")]
    lines = [line for block in table_lines(COLUMNS, rows, None) for line in block]
    assert lines[2] == "0     u      d"  # the first block's widths: `499`, `user`
    assert lines[-1] == "1000000000   a-longer-user   d"  # nothing cut off a terminal


def test_on_a_terminal_the_last_column_folds_and_too_narrow_shows_records() -> None:
    rows = [(1, "root", "word " * 20)]
    lines = [line for block in table_lines(COLUMNS, rows, 60) for line in block]
    assert all(len(line) <= 60 for line in lines) and len(lines) > 3
    assert "".join(lines[2:]).split() == ["1", "root"] + ["word"] * 20
    narrow = [line for block in table_lines(COLUMNS, rows, 20) for line in block]
    assert narrow[:2] == ["#      : 1", "user   : root"]


def test_a_pipe_gets_rows_while_the_command_is_still_reading(store: Store) -> None:
    """`| count`'s input arrives block by block: when the table's source is asked for its
    third block, the first one has been written already."""
    ctx = make_context(store)
    written: list[int] = []

    def source() -> Iterator[tuple[object, ...]]:
        for i in range(3 * BLOCK):
            if i == 2 * BLOCK:
                written.append(len(ctx.out.getvalue().splitlines()))  # type: ignore[attr-defined]
            yield (i, "root", "x")

    ctx.table_out(COLUMNS, source())
    assert written and written[0] >= BLOCK + 2  # header, rule and the first block


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        raise OSError("no terminal")


def test_the_pager_shows_the_first_screen_before_the_command_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PAGER", raising=False)
    monkeypatch.setenv("TERM", "dumb")  # the built-in --More--
    terminal = _Tty()
    pressed: list[str] = []

    def key() -> str:
        pressed.append(terminal.getvalue())
        return "q"

    pager = PagerStream(terminal, rows=5, key=key)
    with pytest.raises(PagerClosed):  # `q`: the next write stops the command
        for i in range(100_000):
            pager.write(f"line {i}\n")
    pager.close_pager()
    assert pressed == ["line 0\nline 1\nline 2\nline 3\n" + MORE]  # a screen, then the prompt
    assert "line 4" not in terminal.getvalue()


def test_output_that_fits_is_written_as_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "dumb")
    terminal = _Tty()
    pager = PagerStream(terminal, rows=10, key=lambda: pytest.fail("no key asked"))
    pager.write("a\nb\nc")
    pager.close_pager()
    assert terminal.getvalue() == "a\nb\nc\n"


ROWS = 100_000
PEAK_RSS_BOUND_MB = 100  # the same rows as JSON peak at ~155 MB; the old rich table at ~740 MB


def fill_audit(home: Path, rows: int) -> None:
    now = time.time()
    with Store.open(home) as store, store.transaction() as db:
        for i in range(rows):
            audit.record(
                db,
                user=("root", "alice", "bob")[i % 3],
                command=("system standby", "system activate", "config execmode setup")[i % 3],
                system="cs2-1",
                detail=f"detail text number {i}",
                at=now - rows + i,
            )


# The child reports its own high-water mark (VmHWM of its own address space) when it exits:
# wait4's ru_maxrss would not do, as Linux carries the parent's peak across fork and exec into
# the child's (a pytest worker of 450 MB made every child "peak" at 450 MB).
REPORT_PEAK = """
import atexit, os, runpy, sys

def _report():
    with open("/proc/self/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    with open(os.environ["CS2SIM_TEST_PEAK_FILE"], "w") as out:
        out.write(str(kb))

atexit.register(_report)
sys.argv = ["cs", *sys.argv[1:]]
runpy.run_module("cs2sim.csshell", run_name="__main__")
"""


def peak_rss_mb(home: Path, line: str, tmp: Path) -> tuple[str, float]:
    """Run `cs -c line`; its stdout and its own peak resident memory in MB."""
    peak_file = tmp / "peak"
    env = {**shell_env(home), "CS2SIM_TEST_PEAK_FILE": str(peak_file)}
    proc = subprocess.run(
        [sys.executable, "-c", REPORT_PEAK, "-c", line],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, int(peak_file.read_text()) / 1024  # kB


@pytest.mark.slow  # 100,000 rows written, then read through two pipes
def test_100000_audit_rows_through_count_and_match_stay_under_the_memory_bound(
    home: Path, tmp_path: Path
) -> None:
    fill_audit(home, ROWS)
    # the three lines in one console (the peak of the three is the process's: each stays under
    # the bound if it does), one console start rather than three
    text, peak = peak_rss_mb(
        home,
        "audit show --all --system all | count\n"
        "audit show --all --system all | match bob | count\n"
        "audit show --all | last 1",
        tmp_path,
    )
    counted, matched, last = text.splitlines()
    assert counted == f"Count: {ROWS + 2} lines"  # header, rule, a line per row
    assert matched == f"Count: {ROWS // 3} lines"
    assert last.split()[0] == str(ROWS) and last.rstrip().endswith(f"number {ROWS - 1}")
    assert peak < PEAK_RSS_BOUND_MB, f"peak RSS {peak:.0f} MB"
