"""Text on its way to a terminal: the ONE place that makes it safe and fits it to the width.

Everything the console prints goes through here (Context.echo / error / table cells, the
banner, `?` help, errors before a Context exists), because much of it is not ours: account
names, audit details, a refused command's words, a system name from cluster.yaml. Two jobs:

* `visible`: control characters become visible text, so a stored ``\\x1b[2J`` (typed by a
  non-admin into `user passwd`, say) shows as ``^[[2J`` in the administrator's `audit show`
  instead of clearing their screen. C0 controls and DEL use caret notation as `cat -v` does
  (ESC -> ``^[``, BEL -> ``^G``); C1 controls and the Unicode bidirectional / invisible format
  characters (which can reorder what a reader sees, "Trojan Source") use ``\\x9b`` / ``\\u202e``.
  The store keeps the original bytes: the audit log is evidence, only its display is escaped.
* `wrap`: on a terminal, a line longer than the width is broken at spaces, and continuation
  lines hang under the text they continue (after `error: `, after `Label : `, under the second
  column of a help row), so nothing breaks mid-word at any width down to 60 columns (or
  narrower). Output to a pipe or file is never wrapped: scripts read one line per fact.
"""

from __future__ import annotations

import re
import textwrap

__all__ = ["visible", "wrap", "fit", "MIN_HANG_ROOM"]

# Unicode format characters that change how text around them is shown (bidi embeddings,
# overrides and isolates, marks, invisible operators), besides the Cc control characters.
_FORMAT = frozenset(
    "\u061c\u200b\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2060\u2061\u2062\u2063\u2064"
    "\u2066\u2067\u2068\u2069\ufeff"
)
# The first column a continuation line hangs under: after "error: ", after "Label : " (the
# first " : "), or after the gap of two or more spaces that ends a help row's first column.
_HANG = re.compile(r"^(?:error: | *[^ :][^:]*? : | *\S+(?: \S+)*? {2,})")
MIN_HANG_ROOM = 30  # a hang leaving fewer columns than this for text falls back to 4 spaces


def _show(ch: str) -> str:
    code = ord(ch)
    if code < 0x20:
        return "^" + chr(code + 0x40)  # ^@ .. ^_ (ESC -> ^[, TAB -> ^I, LF -> ^J)
    if code == 0x7F:
        return "^?"
    if code < 0xA0:  # C1 controls (0x80-0x9f): 0x9b is a one-byte CSI on some terminals
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def visible(text: object) -> str:
    """`text` with every control and invisible format character shown as printable text."""
    s = str(text)
    if s.isprintable():  # the common case: nothing to do (isprintable is False for Cc / Cf)
        return s
    return "".join(
        _show(ch) if (ch < " " or "\x7f" <= ch < "\xa0" or ch in _FORMAT) else ch for ch in s
    )


def wrap(line: str, width: int | None) -> list[str]:
    """One printed line as terminal lines of at most `width` columns, broken at spaces (a
    word longer than a whole line is split, as nothing else would fit); no wrapping for None."""
    if width is None or len(line) <= width:
        return [line]
    width = max(20, width)
    lead = len(line) - len(line.lstrip(" "))
    match = _HANG.match(line)
    hang = match.end() if match else lead
    if width - hang < MIN_HANG_ROOM:
        hang = min(lead + 4, width // 2)
    return textwrap.wrap(
        line,
        width=width,
        subsequent_indent=" " * hang,
        break_on_hyphens=False,  # `weight-streaming`, `--output-format` stay whole
        drop_whitespace=True,
    ) or [line]


def fit(text: object, width: int | None) -> list[str]:
    """`visible` then `wrap`: what one printed line of store or user text becomes. A newline
    inside it is shown as ^J, never obeyed: stored text must not be able to start a line that
    looks like the console's own (`error: ...`, a fake prompt)."""
    return wrap(visible(text), width)
