"""MkDocs hooks (mkdocs.yml's ``hooks:``): the site shows each tested example without the
``# example: NAME`` line that tests/docs_utils.py finds it by, while the page's source keeps it."""

from __future__ import annotations

import re
from typing import Any

from markdown import Extension, Markdown
from markdown.preprocessors import Preprocessor

# A marker line: the first line of a code block's body, indented as the block is (blocks in
# list items are), and nothing else on it.
MARKER = re.compile(r"^(?P<fence>[ \t]*```python[^\n]*\n)[ \t]*# example: [^\n]*\n", re.M)


def strip_example_markers(markdown: str) -> str:
    """``markdown`` without the ``# example: NAME`` line that opens a python code block."""
    return MARKER.sub(r"\g<fence>", markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return strip_example_markers(markdown)


class _StripIncluded(Preprocessor):
    def run(self, lines: list[str]) -> list[str]:
        return strip_example_markers("\n".join(lines) + "\n").split("\n")[:-1]


class ExampleMarkers(Extension):
    """The same for what a page includes (``--8<--``: the quickstart's part of README.md), which
    pymdownx.snippets inserts only once the page's markdown is converted: a preprocessor that
    runs after the snippets' (priority 32) and before the code blocks are read (25)."""

    def extendMarkdown(self, md: Markdown) -> None:
        md.preprocessors.register(_StripIncluded(md), "dlock_example_markers", 31)


def on_config(config: Any, **_: Any) -> Any:
    config.markdown_extensions.append(ExampleMarkers())
    return config
