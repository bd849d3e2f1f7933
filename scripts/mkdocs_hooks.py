"""MkDocs hooks (mkdocs.yml): the home page is the README and the notebooks' page notebooks/README.md, put in at
build time so that no copy is kept by hand.
(The reference pages made from the code are committed: scripts/reference.py writes them, a test checks them.)"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOME = "<!-- the home page: README.md, made at build time (scripts/mkdocs_hooks.py) -->"
NOTEBOOKS = "<!-- the notebooks' page: notebooks/README.md, made at build time (scripts/mkdocs_hooks.py) -->"


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri == "index.md":
        # The README's links point into docs/ from the repository's root; here they are siblings.
        readme = (ROOT / "README.md").read_text().replace("](docs/", "](")
        return _filled(markdown, HOME, readme, page)
    if page.file.src_uri == "notebooks.md":
        # Its links to the notebooks are files of the repository, not of the site: shown as their paths.
        readme = re.sub(r"\[([^\]]+\.ipynb)\]\([^)]+\)", r"`notebooks/\1`", (ROOT / "notebooks" / "README.md").read_text())
        return _filled(markdown, NOTEBOOKS, readme, page)
    return markdown


def _filled(markdown: str, marker: str, content: str, page) -> str:
    if marker not in markdown:
        raise ValueError(f"docs/{page.file.src_uri} lost its marker for the generated content: {marker}")
    return markdown.replace(marker, content)
