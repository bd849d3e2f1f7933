"""The commands the documentation shows are commands the product has: a renamed command or flag fails here,
not in a user's shell. (docs/cli.md itself is generated from the parser: scripts/reference.py.)"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from ticdc_delta.jobs.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in ("cli.md", "performance-history.md"))
PAGES += [ROOT / "README.md", ROOT / "notebooks" / "README.md"]
PARSER = build_parser(demo=False)
COMMANDS = next(a for a in PARSER._actions if isinstance(a, argparse._SubParsersAction)).choices


def _shown() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(where, command) of each command line in a code block (whole commands), and each in running text
    (often a command's name alone, or a flag in passing)."""
    whole, mentioned = [], []
    for page in PAGES:
        text, name = page.read_text(), page.relative_to(ROOT).as_posix()
        in_block = False
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip().startswith("```"):
                in_block = not in_block
            elif in_block and line.strip().startswith("ticdc-delta "):
                whole.append((f"{name}:{number}", line.strip().split(" #")[0]))
        mentioned += [(name, found) for found in re.findall(r"`(ticdc-delta [^`]+)`", text)]
    return whole, mentioned


WHOLE, MENTIONED = _shown()


def _words(command: str) -> list[str]:
    return shlex.split(re.sub(r"\[([^\]]*)\]", r"\1", command))[1:]  # an optional part `[--json]` as given


def test_the_pages_show_commands():
    # Expect: the scan finds what it checks (a change of the pages' form would make the checks vacuous).
    assert len(WHOLE) >= 15 and len(MENTIONED) >= 20


@pytest.mark.parametrize(("where", "command"), WHOLE)
def test_each_command_line_parses(where, command):
    # Expect: every command of a code block is accepted by the command line as written.
    try:
        PARSER.parse_args(_words(command))
    except SystemExit as ended:  # (--version prints and exits 0)
        assert ended.code == 0, f"{where}: `{command}` is not a command line ticdc-delta accepts"


@pytest.mark.parametrize(("where", "command"), MENTIONED)
def test_each_mentioned_command_and_flag_exists(where, command):
    # Expect: a command named in running text exists, and each of its flags is one that command takes.
    words = _words(command)
    parser = PARSER
    if words and not words[0].startswith("-"):
        assert words[0] in COMMANDS, f"{where}: no command {words[0]!r} in `{command}`"
        parser = COMMANDS[words[0]]
    flags = {flag for action in parser._actions + PARSER._actions for flag in action.option_strings}
    for word in words:
        if word.startswith("--"):
            assert word.split("=")[0] in flags, f"{where}: `{command}`: {word} is not a flag of it"


def test_a_renamed_flag_is_caught():
    # Expect: the checks can fail.
    with pytest.raises(SystemExit):
        PARSER.parse_args(_words("ticdc-delta as-of --config job.toml --commitTs 1"))


# What path tables did before the table registry (a RENAME moved the folder, a DROP deleted it at once, and
# both needed a local root): docs/object-storage.md's "Where each table is" says what happens now, and only
# its "Lakes made by earlier releases" may describe the old way.
_OLD_RENAME_AND_DROP = re.compile(r"(directory|folder) (moves|is moved)|need a local root|moved to the new name", re.I)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_describes_renames_and_drops_as_earlier_releases_did(page):
    # Expect: no user page says a RENAME moves a path table's folder (it stays; the registry records it).
    text = page.read_text()
    if page.name == "object-storage.md":
        text = text.split("### Lakes made by earlier releases")[0]
    found = _OLD_RENAME_AND_DROP.search(text)
    assert found is None, f"{page.name}: {found and found.group(0)!r}: see object-storage.md, Where each table is"
