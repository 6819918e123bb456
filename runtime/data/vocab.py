"""BERT's vocabularies: a WordPiece vocab_file when there is one, else the byte-level fallback.

Fallback (no vocab_file, or the file is not there): ids 0-3 are the special tokens [PAD], [CLS],
[SEP], [MASK] and id 4 + b is the byte b (FALLBACK_SIZE = 260 ids in use). The model's table
keeps the config's vocab_size rows (FALLBACK_TABLE_ROWS = 30522, the size of the uncased BERT
vocabulary the published configs name, when the config gives none), so a published config
compiles with its true shapes; the rows past 260 are never read.

vocab_file (one token a line, as Google's BERT vocab.txt): tokens are made from the text by
BERT's basic tokenizer (lower-cased with do_lower, split at whitespace and punctuation) and
greedy longest-match WordPiece ("##" marks a word's continuation, [UNK] where nothing matches).
"""

from __future__ import annotations

import logging
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from cs2sim.system.errors import ConfigError

log = logging.getLogger("cs2sim.data")
CASING_WARNED: set[tuple[str, bool]] = set()  # (vocab_file, do_lower) warned in this process
CASING_SAMPLE_ROWS = 1000  # texts read twice (both do_lower) to measure a mismatch

__all__ = [
    "FALLBACK_SIZE",
    "FALLBACK_TABLE_ROWS",
    "BYTE_OFFSET",
    "Vocab",
    "fallback_vocab",
    "read_vocab",
    "read_vocab_size",
    "wordpiece_ids",
    "lowered_index",
    "is_special",
    "casing_advice",
    "text_casing_advice",
    "warn_casing",
]

SPECIALS = ("[PAD]", "[CLS]", "[SEP]", "[MASK]")
BYTE_OFFSET = len(SPECIALS)  # byte b has id 4 + b
FALLBACK_SIZE = BYTE_OFFSET + 256
FALLBACK_TABLE_ROWS = 30522


@dataclass(frozen=True)
class Vocab:
    """What the masking needs: the special ids and the ids a random replacement draws from."""

    size: int  # ids in use
    pad: int
    cls: int
    sep: int
    mask: int
    pool: tuple[int, int]  # random replacements: ids in [lo, hi)
    source: str  # said in the run's "Training data:" line
    path: str | None = None  # the vocab_file, None for the fallback
    do_lower: bool = False


def fallback_vocab(do_lower: bool = False) -> Vocab:
    """The byte-level fallback vocabulary."""
    return Vocab(
        FALLBACK_SIZE,
        0,
        1,
        2,
        3,
        (BYTE_OFFSET, FALLBACK_SIZE),
        f"byte-level fallback vocabulary ({FALLBACK_SIZE} ids: [PAD] [CLS] [SEP] "
        "[MASK] and the 256 bytes)",
        None,
        do_lower,
    )


def _lines(path: str | Path) -> list[str]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read vocab_file {path} ({e}); check the file.") from None
    return [line.rstrip("\n").rstrip("\r") for line in text.splitlines()]


def read_vocab_size(path: str | Path) -> int:
    """Tokens in a vocab file (one a line), as Model Zoo's get_vocab_size counts them."""
    return len(_lines(path))


def read_vocab(path: str | Path, do_lower: bool = False) -> tuple[Vocab, dict[str, int]]:
    """(Vocab, token -> id) of a WordPiece vocab file; it must hold the four special tokens."""
    tokens = _lines(path)
    index = {t: i for i, t in enumerate(tokens)}
    missing = [s for s in (*SPECIALS, "[UNK]") if s not in index]
    if missing:
        raise ConfigError(
            f"vocab_file {path} has no {missing[0]} token; a BERT vocabulary "
            "needs [PAD], [UNK], [CLS], [SEP] and [MASK]."
        )
    bracketed = [i for t, i in index.items() if t.startswith("[") and t.endswith("]")]
    lo = max(bracketed) + 1  # Google's vocab.txt: [PAD], [unusedN], [UNK] ... come first
    if lo >= len(tokens):
        raise ConfigError(f"vocab_file {path} holds only special tokens; it needs word pieces.")
    vocab = Vocab(
        len(tokens),
        index["[PAD]"],
        index["[CLS]"],
        index["[SEP]"],
        index["[MASK]"],
        (lo, len(tokens)),
        f"WordPiece vocab_file {path} ({len(tokens)} tokens)",
        str(path),
        do_lower,
    )
    return vocab, index


def lowered_index(index: dict[str, int]) -> dict[str, int]:
    """token -> id with every token lower-cased, as the Model Zoo's build_vocab does with
    do_lower (a later id wins where two tokens meet)."""
    return {t.lower(): i for t, i in index.items()}


def is_special(token: str) -> bool:
    """A bracketed token: [CLS], [UNK], [unused12], ..."""
    return token.startswith("[") and token.endswith("]")


def casing_advice(
    vocab_file: str,
    cased: dict[str, int],
    do_lower: bool,
    unk_now: float,
    unk_other: float,
    capitals: float,
    where: str,
    targets: bool = True,
) -> str | None:
    """The warning for a vocabulary and a do_lower that do not suit each other, or None.

    unk_now / unk_other: share of the data's word pieces that become [UNK] with this do_lower
    and with the other (the masked-LM targets are drawn from them); capitals: share of the
    data's word pieces with a capital letter.
    """
    pieces = [t for t in cased if not is_special(t)]
    vocab_caps = sum(t != t.lower() for t in pieces) / max(len(pieces), 1)
    kind = "cased" if vocab_caps >= 0.01 else "uncased"
    now, then = str(do_lower).lower(), str(not do_lower).lower()
    if unk_now >= 0.05 and unk_other <= unk_now / 2:
        return (
            f"{unk_now:.0%} of the word pieces of {where} are not in the {kind} vocab_file "
            f"{vocab_file} with do_lower {now} and become [UNK]"
            f"{', and so do the masked-LM targets drawn from them' if targets else ''} "
            f"({unk_other:.0%} with do_lower {then}); set do_lower: {then}."
        )
    if do_lower and kind == "cased" and capitals > 0:
        return (
            f"vocab_file {vocab_file} is cased ({vocab_caps:.0%} of its word pieces have "
            f"capitals) but do_lower is true, so {capitals:.0%} of the word pieces of {where} "
            "lose their capitals and are read as the lower-case piece; set do_lower: false "
            "(the Model Zoo's default) to keep them."
        )
    if unk_now >= 0.5:
        return (
            f"{unk_now:.0%} of the word pieces of {where} are not in vocab_file {vocab_file} "
            "and become [UNK] with either do_lower; check that the data was made with this "
            "vocabulary."
        )
    return None


def _is_punct(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _basic_tokens(text: str, do_lower: bool) -> list[str]:
    """BERT's basic tokenizer: lower-case (and strip accents) if asked, split at whitespace,
    every punctuation character a token of its own."""
    if do_lower:
        text = "".join(
            c for c in unicodedata.normalize("NFD", text.lower()) if unicodedata.category(c) != "Mn"
        )
    out: list[str] = []
    for word in text.split():
        start = 0
        for i, ch in enumerate(word):
            if _is_punct(ch):
                if i > start:
                    out.append(word[start:i])
                out.append(ch)
                start = i + 1
        if start < len(word):
            out.append(word[start:])
    return out


def _pieces(word: str, index: dict[str, int], unk: int, max_chars: int) -> list[int]:
    """Greedy longest-match WordPiece of one word; [UNK] when some part matches nothing."""
    if len(word) > max_chars:
        return [unk]
    out: list[int] = []
    start = 0
    while start < len(word):
        end, piece = len(word), None
        while start < end:
            sub = word[start:end] if start == 0 else "##" + word[start:end]
            if sub in index:
                piece = index[sub]
                break
            end -= 1
        if piece is None:
            return [unk]
        out.append(piece)
        start = end
    return out


def wordpiece_ids(
    text: str, index: dict[str, int], do_lower: bool, max_chars: int = 100
) -> list[int]:
    """Token ids of `text`: basic tokens, each split greedily into the longest pieces the
    vocabulary has ("##" before a continuation); [UNK] for a word that cannot be split."""
    unk = index["[UNK]"]
    cache: dict[str, list[int]] = {}
    ids: list[int] = []
    for word in _basic_tokens(text, do_lower):
        got = cache.get(word)
        if got is None:
            got = cache[word] = _pieces(word, index, unk, max_chars)
        ids += got
    return ids


def text_casing_advice(
    texts: list[str],
    index: dict[str, int],
    do_lower: bool,
    vocab_file: str,
    where: str,
    targets: bool = True,
) -> str | None:
    """casing_advice for raw text (GLUE sentences, the stand-in text): the texts cut into word
    pieces with this do_lower and with the other, as BERT's FullTokenizer does."""
    unk = index["[UNK]"]

    def unk_share(lower: bool) -> float:
        pieces = [i for text in texts for i in wordpiece_ids(text, index, lower)]
        return sum(i == unk for i in pieces) / max(len(pieces), 1)

    words = [w for text in texts for w in _basic_tokens(text, False)]
    capitals = sum(w != w.lower() for w in words) / max(len(words), 1)
    return casing_advice(
        vocab_file,
        index,
        do_lower,
        unk_share(do_lower),
        unk_share(not do_lower),
        capitals,
        where,
        targets,
    )


def warn_casing(vocab_file: str, do_lower: bool, advice: str | None) -> None:
    """Log the advice as one WARNING, once per (vocab_file, do_lower) in this process."""
    key = (vocab_file, do_lower)
    if advice and key not in CASING_WARNED:
        CASING_WARNED.add(key)
        log.warning(advice)
