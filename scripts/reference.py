"""The reference pages made from the code, committed so that they read where the repository is read (and
checked by tests/unit/test_config_reference.py, which fails when one is stale):

- docs/configuration.md's key table, from the configuration's own types (`ticdc_delta.jobs.config_reference`);
- docs/running.md's exit status table (`ticdc_delta.jobs.exit_statuses`);
- docs/cli.md, every command's `--help` (`ticdc_delta.jobs.cli.build_parser`).

    .venv/bin/python scripts/reference.py            # write both
    .venv/bin/python scripts/reference.py --check    # exit 1 naming each stale page
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# Generated blocks in hand-written pages: (page, what, the code's text), each between its markers.
BLOCKS = {
    "configuration.md": ("the key table", "ticdc_delta.jobs.config_reference"),
    "running.md": ("the exit status table", "ticdc_delta.jobs.exit_statuses"),
}
# (the help's line width: the same page whatever terminal makes it)
_COLUMNS = "100"
_CLI_INTRO = """# Command line

Every command of `ticdc-delta` with its `--help`, generated from the code (`scripts/reference.py`; a test fails
when this page is stale). The configuration file's keys are in the [Configuration reference](configuration.md);
a flag overrides the file's key it names. Exit statuses: [Running the job](running.md#exit-statuses).
`ticdc-delta demo` runs in a repository checkout only (its broker and stream are the repository's
`testbed/`), and is not listed here.
"""


def markers(page: str) -> tuple[str, str]:
    what, source = BLOCKS[page]
    return (f"<!-- {what}: generated from {source} by scripts/reference.py; do not edit -->",
            f"<!-- end of {what} -->")


def block(page: str) -> str:
    """The generated block of `page` as the code makes it now."""
    from ticdc_delta.jobs import config_reference, exit_statuses

    return {"configuration.md": config_reference.table, "running.md": exit_statuses.table}[page]()


def filled(page: str, current: str) -> str:
    """`current` (the text of docs/`page`) with its generated block as the code makes it now."""
    begin, end = markers(page)
    if begin not in current or end not in current:
        raise ValueError(f"docs/{page} lost its generated block's markers: {begin} ... {end}")
    before, rest = current.split(begin, 1)
    after = rest.split(end, 1)[1]
    return f"{before}{begin}\n\n{block(page).rstrip()}\n\n{end}{after}"


def cli_page() -> str:
    """docs/cli.md as the code makes it now."""
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = _COLUMNS
    try:
        from ticdc_delta.jobs.cli import build_parser

        parser = build_parser(demo=False)
        sections = [_CLI_INTRO, "## ticdc-delta\n", "```\n" + parser.format_help().rstrip() + "\n```\n"]
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        for name, command in commands.choices.items():
            sections += [f"## ticdc-delta {name}\n", "```\n" + command.format_help().rstrip() + "\n```\n"]
        return "\n".join(sections)
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous


def pages() -> dict[Path, str]:
    """{page: its content as the code makes it now}."""
    made = {DOCS / page: filled(page, (DOCS / page).read_text()) for page in BLOCKS}
    return {**made, DOCS / "cli.md": cli_page()}


def main() -> int:
    check = "--check" in sys.argv[1:]
    stale = []
    for path, content in pages().items():
        if not path.exists() or path.read_text() != content:
            stale.append(path)
            if not check:
                path.write_text(content)
    for path in stale:
        print(f"{path.relative_to(ROOT)}: {'stale: run scripts/reference.py' if check else 'written'}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
