"""Cleaning of raw text: HTML, control characters, Unicode normalisation, whitespace.

`TextCleaner.clean` works on any piece of text and keeps one space where the piece ended in
whitespace, so cleaned pieces of a long paragraph concatenate to the cleaned paragraph
(`safe_cut` says where such pieces may be cut).
"""

from __future__ import annotations

import html
import re
import unicodedata

from bertcore.data.corpus.counts import CorpusCounts

# Element names of HTML: only these count as tags, so "<stdin>" or "List<int>" survive.
HTML_ELEMENTS = (
    "a", "abbr", "address", "area", "article", "aside", "audio", "b", "base", "bdi", "bdo",
    "blockquote", "body", "br", "button", "canvas", "caption", "center", "cite", "code",
    "col", "colgroup", "data", "datalist", "dd", "del", "details", "dfn", "dialog", "div",
    "dl", "dt", "em", "embed", "fieldset", "figcaption", "figure", "font", "footer", "form",
    "h1", "h2", "h3", "h4", "h5", "h6", "head", "header", "hr", "html", "i", "iframe",
    "img", "input", "ins", "kbd", "label", "legend", "li", "link", "main", "map", "mark",
    "meta", "meter", "nav", "noscript", "object", "ol", "optgroup", "option", "output", "p",
    "param", "picture", "pre", "progress", "q", "rp", "rt", "ruby", "s", "samp", "script",
    "section", "select", "small", "source", "span", "strike", "strong", "style", "sub",
    "summary", "sup", "svg", "table", "tbody", "td", "template", "textarea", "tfoot", "th",
    "thead", "time", "title", "tr", "track", "tt", "u", "ul", "var", "video", "wbr",
)

_SCRIPT_OR_STYLE = re.compile(
    r"<(script|style)\b[^<>]{0,1000}>.{0,100000}?</\1\s*>", re.IGNORECASE | re.DOTALL
)
_TAG = re.compile(
    r"<!--.{0,10000}?-->"  # comments
    r"|<![A-Za-z][^<>]{0,1000}>"  # <!DOCTYPE ...>
    rf"|</?(?:{'|'.join(HTML_ELEMENTS)})(?:\s[^<>]{{0,1000}})?/?>",
    re.IGNORECASE | re.DOTALL,
)
_WHITESPACE = re.compile(r"[^\S ]\s*| \s+")  # any whitespace but a lone space

# Control characters go; the ones that separate words become spaces. Invisible format
# characters that break words apart (soft hyphen, zero-width space, BOM) go as well.
_SPACE_LIKE = "\t\n\v\f\r\x1c\x1d\x1e\x1f\x85"
_CONTROL_TABLE = {
    code: (" " if chr(code) in _SPACE_LIKE else None)
    for code in [*range(0x00, 0x20), *range(0x7F, 0xA0)]
}
_CONTROL_TABLE.update({ord(ch): None for ch in "\u00ad\u200b\u2060\ufeff"})


class TextCleaner:
    """Clean text and count what was removed (in `counts`: a count stays None until some
    text needs its step)."""

    def __init__(self, normalization: str = "NFKC"):
        self.normalization = normalization
        self.counts = CorpusCounts()

    def clean(self, text: str) -> str:
        counts = self.counts
        if "<" in text:
            text, scripts = _SCRIPT_OR_STYLE.subn(" ", text)
            text, tags = _TAG.subn(" ", text)
            counts.html_tags_removed = (counts.html_tags_removed or 0) + scripts + tags
        if "&" in text:
            text = html.unescape(text)
        # Everything removed or folded below is "not printable" (or a double space): most
        # lines need none of it.
        if not text.isprintable():
            length = len(text)
            text = text.translate(_CONTROL_TABLE)
            removed = length - len(text)
            counts.control_characters_removed = (counts.control_characters_removed or 0) + removed
        if not text.isascii():
            text = unicodedata.normalize(self.normalization, text)
        if "  " in text or not text.isprintable():
            text = _WHITESPACE.sub(" ", text)
        return text


def safe_cut(text: str, near: int) -> int:
    """An offset in (0, near] where `text` can be cut so that each part cleans alone.

    Just after the last space before `near` that is not inside an HTML tag; failing that, a
    hard cut that does not separate a character from its combining marks.
    """
    window = max(0, near - 4096)
    limit = near
    opening = text.rfind("<", window, near)
    if opening > 0 and text.find(">", opening, near) < 0:
        limit = opening  # a tag may be open: cut before it
    space = text.rfind(" ", window, limit)
    if space >= 0:
        return space + 1
    if limit < near:
        return limit
    cut = near
    while cut > window + 1 and cut < len(text) and unicodedata.combining(text[cut]):
        cut -= 1
    return cut
