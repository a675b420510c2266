"""MkDocs hooks (mkdocs.yml's ``hooks:``): the site shows each tested example without the
``# example: NAME`` line that tests/docs_utils.py finds it by, while the page's source keeps it."""

from __future__ import annotations

import re
from typing import Any

# A marker line: the first line of a code block's body, indented as the block is (blocks in
# list items are), and nothing else on it.
MARKER = re.compile(r"^(?P<fence>[ \t]*```python[^\n]*\n)[ \t]*# example: [^\n]*\n", re.M)


def strip_example_markers(markdown: str) -> str:
    """``markdown`` without the ``# example: NAME`` line that opens a python code block."""
    return MARKER.sub(r"\g<fence>", markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return strip_example_markers(markdown)
