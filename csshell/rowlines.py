"""Tables drawn as lines, block by block, so a long table streams.

    #   when       user     command           state                  outcome   detail
    ─────────────────────────────────────────────────────────────────────────────────────
    1   06:06:51   root     system standby    ACTIVE → STANDBY       ok        no jobs running

The look is rich's `box.SIMPLE_HEAD` table without edges (a header, a rule, three spaces
between columns), but each row is formatted by hand: rich lays out the whole table before it
prints a line, ~0.65 ms and ~7 KB a row, so 100,000 audit rows took a minute and 700 MB and
nothing reached `| count`, `| match` or the pager until the end. Here the columns take the
widths of the first block of rows (and only grow after it), and every block is written as soon
as it is formatted.

On a terminal the last column (the details) folds into the room left; a table that would not
fit even with that column narrowed to MIN_LAST_WIDTH is shown as one `column : value` block
per row, and a later row too wide for the terminal has its cell cut with `…`. Off a terminal
nothing is cut or folded: scripts read one line per row.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import islice

from cs2sim.csshell.render import kv_lines
from cs2sim.csshell.terminal import visible

__all__ = ["table_lines", "table_width", "BLOCK", "MIN_LAST_WIDTH", "GAP"]

BLOCK = 500  # rows measured and written at a time
MIN_LAST_WIDTH = 20  # the details column is never folded narrower than this
GAP = "   "  # between columns, as rich's SIMPLE_HEAD box with its padding
RULE = "─"


def _cells(text: str) -> int:
    """Terminal columns of `text` (a wide CJK character takes two)."""
    if text.isascii():
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


def table_width(widths: Sequence[int]) -> int:
    """Columns a table needs: every column whole but the last, which may fold."""
    return sum(widths[:-1]) + min(widths[-1], MIN_LAST_WIDTH) + len(GAP) * (len(widths) - 1)


def _pad(text: str, width: int) -> str:
    return text + " " * (width - _cells(text))


def _cut(text: str, width: int) -> str:
    """`text` in at most `width` columns, ending in `…` when cut."""
    if _cells(text) <= width:
        return text
    from rich.cells import set_cell_size

    return set_cell_size(text, max(0, width - 1)) + "…"


def _fold(text: str, width: int) -> list[str]:
    """The last column's text in lines of at most `width` columns, broken at spaces."""
    if _cells(text) <= width:
        return [text]
    import textwrap

    if text.isascii():
        return textwrap.wrap(text, width, break_on_hyphens=False) or [text]
    from rich.cells import chop_cells

    return chop_cells(text, width) or [text]


def table_lines(
    columns: Sequence[str], rows: Iterable[Sequence[object]], width: int | None
) -> Iterator[list[str]]:
    """The lines of the table, one list per block of rows, made as the rows are read.
    `width`: the terminal's columns, or None when the output is not a terminal."""
    source = iter(rows)
    widths = [_cells(c) for c in columns]
    records: bool | None = None  # decided by the first block
    first = True
    while True:
        block = [[visible(cell) for cell in row] for row in islice(source, BLOCK)]
        if records is None:
            grown = _grow(widths, block)
            records = width is not None and width < table_width(grown)
            if not records:
                widths = grown
                yield _head(columns, widths, width)
        elif not records:
            grown = _grow(widths, block)
            if width is None or table_width(grown) <= width:
                widths = grown
        if not block:
            return
        if records:
            lines = _records(columns, block)
            yield lines[1:] if first else lines  # blank lines only between rows
        else:
            yield _rows(block, widths, width)
        first = False


def _grow(widths: list[int], block: list[list[str]]) -> list[int]:
    grown = list(widths)
    for row in block:
        for i, cell in enumerate(row):
            n = len(cell) if cell.isascii() else _cells(cell)
            if n > grown[i]:
                grown[i] = n
    return grown


def _last_room(widths: Sequence[int], width: int | None) -> int | None:
    if width is None:
        return None
    return max(MIN_LAST_WIDTH, width - sum(widths[:-1]) - len(GAP) * (len(widths) - 1))


def _head(columns: Sequence[str], widths: list[int], width: int | None) -> list[str]:
    room = _last_room(widths, width)
    last = widths[-1] if room is None else min(widths[-1], room)
    head = GAP.join(_pad(c, w) for c, w in zip(columns[:-1], widths, strict=False))
    head = (head + GAP if len(columns) > 1 else "") + columns[-1]
    rule = RULE * (sum(widths[:-1]) + last + len(GAP) * (len(widths) - 1))
    return [head.rstrip(), rule]


def _rows(block: list[list[str]], widths: list[int], width: int | None) -> list[str]:
    room = _last_room(widths, width)
    lines: list[str] = []
    indent = " " * (sum(widths[:-1]) + len(GAP) * (len(widths) - 1))
    for row in block:
        if width is None:
            lead = GAP.join(_pad(c, w) for c, w in zip(row[:-1], widths, strict=False))
        else:
            lead = GAP.join(_pad(_cut(c, w), w) for c, w in zip(row[:-1], widths, strict=False))
        lead = lead + GAP if len(row) > 1 else ""
        parts = [row[-1]] if room is None else _fold(row[-1], room)
        lines.append((lead + parts[0]).rstrip())
        lines.extend((indent + part).rstrip() for part in parts[1:])
    return lines


def _records(columns: Sequence[str], block: list[list[str]]) -> list[str]:
    """Each row as aligned `column : value` lines, a blank line before each."""
    lines: list[str] = []
    for row in block:
        lines.append("")
        lines.extend(kv_lines(list(zip(columns, row, strict=True))))
    return lines
