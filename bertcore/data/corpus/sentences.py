"""Sentence splitting for English-like and CJK text, fed in chunks of any size.

Rules, kept simple on purpose:
- after 。！？ (and a closing quote or bracket) a sentence always ends, space or not;
- after ! or ? written right after a CJK character (NFKC turns ！？ into !?) likewise;
- after . ! ? (and closing quotes/brackets) a sentence ends when a space follows and then an
  upper-case letter, a digit, an opening quote/bracket or a CJK character, unless the word
  before the period is a known abbreviation ("e.g.", "Dr.", "No. 5"), a single letter (an
  initial: "J. Smith") or the number of a list item that starts the sentence ("2. Maps");
- "3.14" never splits (no space after the period);
- a sentence longer than `max_chars` is cut at the last space before the limit, or hard.

The splitter keeps only the unfinished tail of the text between calls, so a 10 MB line costs
time linear in its length and memory bounded by `max_chars` plus one chunk.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

# Han, kana, hangul, CJK punctuation and full-width forms.
CJK_CHARS = "\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef"
_CLOSERS = "\"'”’»)\\]}」』）】》〉"
_OPENERS = "\"'“‘«([{「『（【《〈"

_BOUNDARY = re.compile(
    rf"[。！？｡]+[{_CLOSERS}]*"  # CJK sentence ends: always a boundary
    rf"|[.!?]+[{_CLOSERS}]*(?=[ {CJK_CHARS}])"  # decided by what is around (_boundaries)
)
_CJK = re.compile(f"[{CJK_CHARS}]")

# Words whose period does not end a sentence ("Dr. Smith", "e.g. Python").
ABBREVIATIONS = frozenset(
    (
        "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "vs", "cf", "al",
        "inc", "ltd", "co", "corp", "dept", "est", "gen", "gov", "lt", "col", "sgt",
        "capt", "rev", "hon", "jan", "feb", "apr", "aug", "sep", "sept", "oct", "nov",
        "dec", "e.g", "i.e", "a.m", "p.m", "u.s", "u.k", "ph.d", "b.sc", "m.sc", "viz",
        "resp", "ed", "eds",
    )
)
# ... nor when a number follows ("No. 5", "p. 12", "Fig. 3").
NUMBER_ABBREVIATIONS = frozenset(
    (
        "no", "nos", "nr", "p", "pp", "vol", "vols", "fig", "figs", "eq", "eqs", "ch",
        "sec", "secs", "approx", "ca", "op", "art", "para",
    )
)


class SentenceSplitter:
    """Turn a stream of cleaned text into sentences.

    `feed(text)` returns the sentences completed so far; `end()` closes the current unit (a
    paragraph, or a line of one-sentence-per-line input) and returns what is left. With
    `split=False` only `end()` and the length limit cut sentences.
    """

    def __init__(self, max_chars: int = 1000, split: bool = True):
        self.max_chars = max_chars
        self.split = split
        self.overlong_cuts = 0  # how many times a sentence was cut for length
        self._tail = ""

    def feed(self, text: str) -> list[str]:
        if not text:
            return []
        if self._tail.endswith(" ") and text.startswith(" "):
            text = text[1:]
        buffer = self._tail + text
        sentences: list[str] = []
        start = 0
        if self.split:
            for end in _boundaries(buffer, final=False):
                self._emit(buffer, start, end, sentences)
                start = end
        # Without a boundary in sight, cut what can no longer fit in one sentence.
        start = _skip_space(buffer, start)
        while len(buffer) - start > self.max_chars + 1:
            cut = _cut_point(buffer, start, self.max_chars)
            self.overlong_cuts += 1
            _append(sentences, buffer[start:cut])
            start = _skip_space(buffer, cut)
        self._tail = buffer[start:]
        return sentences

    def end(self) -> list[str]:
        buffer, self._tail = self._tail, ""
        sentences: list[str] = []
        start = 0
        if self.split:
            for end in _boundaries(buffer, final=True):
                self._emit(buffer, start, end, sentences)
                start = end
        self._emit(buffer, start, len(buffer), sentences)
        return sentences

    def _emit(self, buffer: str, start: int, end: int, out: list[str]) -> None:
        """Append buffer[start:end] to `out`, cut into pieces of at most max_chars."""
        start = _skip_space(buffer, start)
        while end - start > self.max_chars:
            cut = _cut_point(buffer, start, self.max_chars)
            self.overlong_cuts += 1
            _append(out, buffer[start:cut])
            start = _skip_space(buffer, cut)
        _append(out, buffer[start:end])


def split_sentences(text: str, max_chars: int = 1000) -> list[str]:
    """Split one paragraph of cleaned text into sentences."""
    splitter = SentenceSplitter(max_chars)
    return splitter.feed(text) + splitter.end()


def _boundaries(text: str, final: bool) -> Iterator[int]:
    """Offsets just after each sentence end in `text`.

    When more text may follow (`final=False`), a candidate too close to the end to be judged
    is left for the next call, which sees it again with the text that follows.
    """
    limit = len(text) if final else len(text) - 2
    sentence_start = 0
    for match in _BOUNDARY.finditer(text):
        end = match.end()
        if end > limit:
            break
        start = match.start()
        if text[start] in "。！？｡" or (
            text[end] != " " and text[start] in "!?" and _CJK.match(text, start - 1)
        ):
            yield end  # CJK, or ！？ (folded to ASCII by NFKC) right after CJK
            sentence_start = end
        elif text[end] == " " and _latin_boundary(text, sentence_start, start, end):
            yield end
            sentence_start = end


def _latin_boundary(text: str, sentence_start: int, start: int, end: int) -> bool:
    """Is the `.`/`!`/`?` at text[start:end] (followed by a space) the end of a sentence?"""
    if end + 1 >= len(text):
        return True  # only a trailing space follows: the unit ends here
    following = text[end + 1]
    number = following.isdigit()
    if not (number or following.isupper() or following in _OPENERS or _CJK.match(following)):
        return False
    if text[start] == "." and end - start == 1:
        word = _word_before(text, start)
        if word.isdigit():
            while sentence_start < start and text[sentence_start] == " ":
                sentence_start += 1
            if start - sentence_start == len(word):
                return False  # a numbered list item: "2. Mappings."
        word = word.lstrip(_OPENERS).lower()
        if len(word) == 1 and word.isalpha():
            return False  # an initial, as in "J. Smith"
        if word in ABBREVIATIONS or (number and word in NUMBER_ABBREVIATIONS):
            return False
    return True


def _word_before(text: str, end: int, longest: int = 12) -> str:
    """The word ending at `end`, or "" when it is longer than any abbreviation."""
    low = max(0, end - longest)
    space = text.rfind(" ", low, end)
    if space >= 0:
        return text[space + 1 : end]
    return text[:end] if low == 0 else ""


def _cut_point(text: str, start: int, max_chars: int) -> int:
    """Where to cut text[start:] so the piece has at most max_chars: the last space, or hard."""
    space = text.rfind(" ", start + max_chars // 2, start + max_chars + 1)
    return space if space > start else start + max_chars


def _skip_space(text: str, start: int) -> int:
    while start < len(text) and text[start] == " ":
        start += 1
    return start


def _append(out: list[str], piece: str) -> None:
    piece = piece.strip()
    if piece:
        out.append(piece)
