"""Sphinx extension: inline code in prose breaks at sensible points only.

The book's CSS keeps each word of inline code whole (``code.literal span.pre`` does not wrap),
so a flag such as ``--gpu-memory-utilization`` is never split at its hyphens on a phone. A word
too long for a phone's column (a dotted name, ``kvlib.fit.validation.engine_pool_validation``)
is cut here into pieces after each dot and comma and before an opening bracket, with a ``<wbr>``
between them: a line may end there, and nowhere else. Copied text is unchanged.
"""
from __future__ import annotations

import re

#: Words of inline code at least this long (characters) get break points; ~36 monospace
#: characters fill a 390-px phone's column.
LONG_WORD = 30
_WORD = re.compile(r'<span class="pre">([^<]+)</span>')
_POINT = re.compile(r"(?<=[.,])(?=.)|(?<=.)(?=\()")


def break_long_words(body: str) -> str:
    """``body`` (HTML) with every inline-code word of ``LONG_WORD`` or more characters split
    into ``span.pre`` pieces joined by ``<wbr>`` at its dots, commas and opening brackets."""
    def split(match: re.Match[str]) -> str:
        word = match.group(1)
        if len(word) < LONG_WORD:
            return match.group(0)
        return "<wbr>".join(f'<span class="pre">{part}</span>' for part in _POINT.split(word))
    return _WORD.sub(split, body)


def _page(app, pagename, templatename, context, doctree) -> None:
    if "body" in context:
        context["body"] = break_long_words(context["body"])


def setup(app):
    app.connect("html-page-context", _page)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
