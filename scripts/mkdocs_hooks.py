"""MkDocs hooks (mkdocs.yml): pages that show what the code or the README says are made from them at build time,
so that no copy is kept by hand."""

from __future__ import annotations

from pathlib import Path

from ticdc_delta.jobs import config_reference

ROOT = Path(__file__).resolve().parents[1]
CONFIGURATION = "<!-- the configuration table: made from the configuration code at build time (ticdc_delta.jobs.config_reference) -->"
HOME = "<!-- the home page: README.md, made at build time (scripts/mkdocs_hooks.py) -->"


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri == "configuration.md":
        return _filled(markdown, CONFIGURATION, config_reference.table().rstrip("\n"), page)
    if page.file.src_uri == "index.md":
        # The README's links point into docs/ from the repository's root; here they are siblings.
        readme = (ROOT / "README.md").read_text().replace("](docs/", "](")
        return _filled(markdown, HOME, readme, page)
    return markdown


def _filled(markdown: str, marker: str, content: str, page) -> str:
    if marker not in markdown:
        raise ValueError(f"docs/{page.file.src_uri} lost its marker for the generated content: {marker}")
    return markdown.replace(marker, content)
