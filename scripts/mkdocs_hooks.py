"""MkDocs hooks (mkdocs.yml): pages that show what the code defines are made from the code at build time."""

from __future__ import annotations

from ticdc_delta.jobs import config_reference

MARKER = "<!-- the configuration table: made from the configuration code at build time (ticdc_delta.jobs.config_reference) -->"


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri == "configuration.md":
        if MARKER not in markdown:
            raise ValueError(f"docs/configuration.md lost its marker for the generated table: {MARKER}")
        return markdown.replace(MARKER, config_reference.table().rstrip("\n"))
    return markdown
