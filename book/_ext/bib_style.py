"""Sphinx extension: author–year labels in the bibliographies ("Kwon et al., 2023"), matching
the author–year citations in the text, instead of pybtex's alpha keys ("[KLZ+23a]").

Registers the pybtex formatting style ``authoryear`` (``bibtex_default_style`` in _config.yml):
pybtex's ``unsrt`` entries, labelled by surname(s) and year, sorted by that label and title.
Two entries of one bibliography with the same label get "a", "b" after the year.
"""
from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache

from pybtex.backends.plaintext import Backend as PlainText
from pybtex.plugin import register_plugin
from pybtex.richtext import Text
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from pybtex.style.sorting import BaseSortingStyle
from pybtex.style.template import field, href, words


@lru_cache(maxsize=None)
def _plain(latex: str) -> str:
    """A BibTeX name part as text: braces and accents resolved ("Lebr{\\'o}n" → "Lebrón").
    The plain-text backend is named directly: ``render_as("text")`` looks it up among every
    installed package's entry points on each call, which took most of the book's build time."""
    return Text.from_latex(latex).render(PlainText())


def _surname(person) -> str:
    return " ".join(_plain(part) for part in [*person.prelast_names, *person.last_names])


class AuthorYearLabelStyle(BaseLabelStyle):
    def format_labels(self, sorted_entries):
        labels = [self.format_label(entry) for entry in sorted_entries]
        count, seen = Counter(labels), Counter()
        for label in labels:
            if count[label] == 1:
                yield label
            else:
                yield label + "abcdefghijklmnopqrstuvwxyz"[seen[label]]
                seen[label] += 1

    def format_label(self, entry) -> str:
        persons = entry.persons.get("author") or entry.persons.get("editor") or []
        names = [_surname(p) for p in persons]
        if not names:
            who = _plain(entry.fields.get("organization", entry.fields.get("title", "Anon.")))
        elif len(names) == 1:
            who = names[0]
        elif len(names) == 2:
            who = f"{names[0]} and {names[1]}"
        else:
            who = f"{names[0]} et al."
        return f"{who}, {entry.fields.get('year', 'n.d.')}"


class AuthorYearSortingStyle(BaseSortingStyle):
    """Alphabetical by the label a reader sees (organisations and people alike), then title."""

    def sorting_key(self, entry):
        label = AuthorYearLabelStyle().format_label(entry)
        return label.casefold(), _plain(entry.fields.get("title", "")).casefold()


class AuthorYearStyle(UnsrtStyle):
    default_label_style = "authoryear"
    default_sorting_style = "authoryear"

    def format_url(self, e):
        """"URL: github.com/vllm-project/vllm", linked: the address without its scheme, so the
        theme does not shorten a GitHub link to a bare "vllm-project/vllm" under the label."""
        url = field("url", raw=True)
        return words["URL:", href(url)[field("url", raw=True, apply_func=_without_scheme)]]


def _without_scheme(url: str) -> str:
    return re.sub(r"^https?://", "", url).rstrip("/")


def setup(app):
    register_plugin("pybtex.style.labels", "authoryear", AuthorYearLabelStyle)
    register_plugin("pybtex.style.sorting", "authoryear", AuthorYearSortingStyle)
    register_plugin("pybtex.style.formatting", "authoryear", AuthorYearStyle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
