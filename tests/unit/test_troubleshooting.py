"""docs/troubleshooting.md keys its entries by the first words of the lines the product prints: each entry must
still be a line the code can print, and each exit status must have its section."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from ticdc_delta.jobs import exit_statuses

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "troubleshooting.md").read_text()
PRODUCT = ("apply", "jobs", "schema_cache", "ticdc_delta")
# The prefixes the command puts before a product's own message (jobs/cli.py, ticdc_delta/exceptions.py).
PREFIXES = ("configuration error: ", "cannot decode <topic> partition <n> offset <offset>: ")
HOLE = "\x00"  # where a message template puts in a value (an f-string's field, a %s)


def _templates() -> list[str]:
    """Every string literal of the product's code, implicit concatenations joined, each put-in value a HOLE."""
    found = []
    for package in PRODUCT:
        for source in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(source.read_text(), str(source))):
                if isinstance(node, ast.JoinedStr):
                    found.append("".join(v.value if isinstance(v, ast.Constant) else HOLE for v in node.values))
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    found.append(node.value.replace("%s", HOLE))
    return found


TEMPLATES = _templates()
ENTRIES = re.findall(r"^### `(.+)`$", PAGE, flags=re.M)


def _pattern(line: str) -> re.Pattern:
    """`line` as the page writes it (`<...>` where the product puts in a value) as a pattern over templates."""
    fixed = re.split(r"<[^>]+>", line)
    assert sum(len(part.strip()) for part in fixed) >= 15, f"too little of {line!r} is fixed to check it"
    return re.compile(".*?".join(re.escape(part) for part in fixed), flags=re.S)


def test_the_page_has_entries():
    # Expect: the page is read as intended (a change of its heading form would make the checks below vacuous).
    assert len(ENTRIES) >= 30


@pytest.mark.parametrize("entry", ENTRIES)
def test_each_entry_is_a_line_the_code_prints(entry):
    # Expect: the entry's fixed words, in order, are one message template of the product's code (its prefix,
    # which the command adds, checked on its own).
    for prefix in PREFIXES:
        if entry.startswith(prefix):
            assert any(_pattern(prefix.rstrip()).search(t) for t in TEMPLATES), prefix
            entry = entry[len(prefix):]
    pattern = _pattern(entry)
    assert any(pattern.search(t) for t in TEMPLATES), f"no message of the code reads {entry!r}"


def test_an_entry_the_code_does_not_print_is_caught():
    # Expect: the check can fail (a message reworded in the code leaves its entry unmatched).
    assert not any(_pattern("Kafka at <servers> refused the credentials of the job").search(t) for t in TEMPLATES)


def test_every_failing_exit_status_has_its_section():
    # Expect: a section "## N: ..." for each status but 0, in the code's order, and no other.
    sections = [int(n) for n in re.findall(r"^## (\d+): ", PAGE, flags=re.M)]
    assert sections == [s.code for s in exit_statuses.STATUSES if s.code != 0]
