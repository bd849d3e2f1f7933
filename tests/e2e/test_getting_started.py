"""docs/getting-started.md runs as written: its job.toml, its commands and its reads (Spark, pandas, Polars,
DuckDB) are taken from the page, run on the sample stream the page names, and each read must print what the
page shows. Only the page's addresses are replaced (broker, topic, group, target folder)."""

from __future__ import annotations

import re
import shlex
import uuid
from pathlib import Path

from testbed.demo import demo_changefeed
from tests.support import publish
from ticdc_delta.jobs.cli import exit_status

PAGE = Path(__file__).resolve().parents[2] / "docs" / "getting-started.md"


def _marked_blocks() -> list[tuple[str, str]]:
    """(kind, body) of each code block the page marks `<!-- getting-started: kind -->`, in page order."""
    return re.findall(r"<!-- getting-started: (\S+) -->\n```[^\n]*\n(.*?)```", PAGE.read_text(), flags=re.S)


def test_the_page_runs_as_written_and_prints_what_it_shows(spark, kafka, tmp_path, capsys, monkeypatch):
    # Expect: the page's job runs on the sample stream and exits 0, status exits 0, and each read prints exactly
    # the output the page shows after it (a changed product, reader or page fails here).
    blocks = _marked_blocks()
    kinds = [kind for kind, _ in blocks]
    assert kinds[:2] == ["job.toml", "commands"] and kinds[2:] == ["python", "output"] * 4, kinds
    topic, group, lake = f"getting-started-{uuid.uuid4().hex[:8]}", f"gs-{uuid.uuid4().hex[:8]}", tmp_path / "lake"

    addresses = (("kafka-1:9092", kafka.bootstrap_servers), ('"tidb-shop"', f'"{topic}"'),
                 ('"shop-to-delta"', f'"{group}"'), ("/lake/tidb", str(lake)))
    assert all(page_says in blocks[0][1] for page_says, _ in addresses), "the page's job.toml changed its addresses"

    def here(text: str) -> str:
        for page_says, this_run in addresses:
            text = text.replace(page_says, this_run)
        return text

    publish(kafka, topic, demo_changefeed().messages, partitions=3)
    (tmp_path / "job.toml").write_text(here(blocks[0][1]))
    monkeypatch.chdir(tmp_path)
    commands = [line for line in blocks[1][1].splitlines() if line.strip()]
    assert [c.split()[1] for c in commands] == ["run", "status"]
    for command in commands:
        assert exit_status(shlex.split(command)[1:]) == 0, command
    capsys.readouterr()
    for (_, code), (_, shown) in zip(blocks[2::2], blocks[3::2], strict=True):
        exec(compile(here(code), str(PAGE), "exec"), {"__name__": "getting_started"})  # noqa: S102 - the page's own code
        printed = capsys.readouterr().out
        assert [line.rstrip() for line in printed.rstrip().splitlines()] == [
            line.rstrip() for line in shown.rstrip().splitlines()
        ], f"the page shows:\n{shown}\nthe code printed:\n{printed}"
