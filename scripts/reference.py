"""The reference pages made from the code, committed so that they read where the repository is read (and
checked by tests/unit/test_config_reference.py, which fails when one is stale):

- docs/configuration.md's key table, from the configuration's own types (`ticdc_delta.jobs.config_reference`);
- docs/running.md's exit status table (`ticdc_delta.jobs.exit_statuses`);
- docs/cli.md, every command's `--help` (`ticdc_delta.jobs.cli.build_parser`);
- docs/api.md, the public Python API's signatures and docstrings (`API` below).

    .venv/bin/python scripts/reference.py            # write them all
    .venv/bin/python scripts/reference.py --check    # exit 1 naming each stale page
"""

from __future__ import annotations

import argparse
import importlib
import inspect
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


# The public Python API: what the docs, the notebooks and the recipes call, by module (a method as Class.method).
API = {
    "ticdc_delta.jobs.config": ("load", "from_mapping"),
    "ticdc_delta.jobs.session": ("get_spark",),
    "ticdc_delta.jobs.pipeline": ("Pipeline.from_config", "Pipeline.run"),
    "ticdc_delta.jobs.tables": ("table_path",),
    "ticdc_delta.apply.as_of": ("consistent_read", "ConsistentRead", "ConsistentRead.frames", "commit_ts_at"),
    "ticdc_delta.apply.progress": ("applied_history", "version_as_of", "read_as_of", "upstream_time", "AppliedVersion"),
    "ticdc_delta.jobs.topic_reader": ("read_topics", "consumer_lag"),
    "ticdc_delta.jobs.replay": ("replay_dead_letters",),
}
_API_INTRO = """# Python API

The functions the notebooks, the recipes and your own code call, with their signatures and docstrings,
generated from the code (`scripts/reference.py`; a test fails when this page is stale). Import them from the
module named in each heading; `spark` (or `sql`) is a SparkSession with Delta, `config` what
`ticdc_delta.jobs.config.load` returns. Everything else in the packages may change between releases.
"""


class _Shown(str):
    """Text shown as it is in a signature (inspect shows an annotation or a default by its repr)."""

    def __repr__(self) -> str:
        return str(self)


def _signature(target) -> str:
    """`target`'s parameters as written in the code (annotations as their text; a long default as `...`)."""
    signature = inspect.signature(target)

    def shown(value):
        if value is inspect.Parameter.empty:
            return value
        return _Shown(value) if isinstance(value, str) else value

    parameters = []
    for parameter in signature.parameters.values():
        default = parameter.default
        if default is not inspect.Parameter.empty and len(repr(default)) > 40:
            default = _Shown("...")
        parameters.append(parameter.replace(annotation=shown(parameter.annotation), default=default))
    returns = inspect.Signature.empty if inspect.isclass(target) else shown(signature.return_annotation)
    return str(signature.replace(parameters=parameters, return_annotation=returns))


def api_page() -> str:
    """docs/api.md as the code makes it now."""
    sections = [_API_INTRO]
    for module_name, names in API.items():
        module = importlib.import_module(module_name)
        sections.append(f"## {module_name}\n")
        for name in names:
            target = module
            for part in name.split("."):
                target = getattr(target, part)
            kind = "class " if inspect.isclass(target) else ""
            doc = inspect.getdoc(target) or ""
            if not doc:
                raise ValueError(f"{module_name}.{name} is public API without a docstring")
            sections.append(f"### {kind}`{name}{_signature(target)}`\n\n{doc}\n")
    return "\n".join(sections)


def pages() -> dict[Path, str]:
    """{page: its content as the code makes it now}."""
    made = {DOCS / page: filled(page, (DOCS / page).read_text()) for page in BLOCKS}
    return {**made, DOCS / "cli.md": cli_page(), DOCS / "api.md": api_page()}


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
