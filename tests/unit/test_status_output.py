"""`ticdc-delta status` output: the text tables and the JSON, from a report."""

from __future__ import annotations

import datetime as dt
import json

from ticdc_delta.jobs.status import PartitionStatus, StatusReport, TableStatus, render, to_json

UTC = dt.timezone.utc
TS = (1_772_366_400_123 << 18) + 7  # 2026-03-01T12:00:00.123Z


def report(**changes) -> StatusReport:
    values = dict(
        consumer="orders-cdc",
        checkpoint=12,
        checkpoint_saved_at=dt.datetime(2026, 3, 1, 12, 0, 5, tzinfo=UTC),
        partitions=[PartitionStatus("cdc", 0, 1200, 1200), PartitionStatus("cdc", 1, 990, 1000)],
        tables=[
            TableStatus("shop", "items", True, version=4, applied_ts=TS, applied_version=4),
            TableStatus("shop", "gone", False, removed_ts=TS - 5),
            TableStatus("shop", "soon", False),
            TableStatus("shop", "avro", True, version=2, applied_offsets={"t/0": 17, "t/1": 3}, applied_version=2),
        ],
    )
    values.update(changes)
    return StatusReport(**values)


def test_text():
    assert render(report()) == (
        "consumer orders-cdc: checkpoint 12, saved 2026-03-01 12:00:05 UTC\n"
        "\n"
        "partition  committed    end  lag\n"
        "cdc/0          1,200  1,200    0\n"
        "cdc/1            990  1,000   10\n"
        "total                         10\n"
        "\n"
        "table       version    applied commitTs  upstream time\n"
        f"shop.items        4  {TS}  2026-03-01 12:00:00.123 UTC\n"
        f"shop.gone         -                   -  dropped or renamed at commitTs {TS - 5}\n"
        "shop.soon         -                   -  not created yet\n"
        "shop.avro         2                   -  offsets t/0:17, t/1:3\n"
    )


def test_text_before_the_first_run():
    text = render(report(checkpoint=None, checkpoint_saved_at=None, partitions=[PartitionStatus("cdc", 0, None, 50)],
                         tables=[]))
    assert text.startswith("consumer orders-cdc: no checkpoint yet\n")
    assert "cdc/0              -   50    -\ntotal                        -\n" in text
    assert text.endswith("\nno tables yet\n")


def test_json():
    values = json.loads(json.dumps(to_json(report())))
    assert values["consumer"] == "orders-cdc" and values["checkpoint"] == 12 and values["total_lag"] == 10
    assert values["checkpoint_saved_at"] == "2026-03-01T12:00:05+00:00"
    assert values["partitions"][1] == {"topic": "cdc", "partition": 1, "committed": 990, "end": 1000, "lag": 10}
    assert values["tables"][0] == {
        "database": "shop",
        "table": "items",
        "exists": True,
        "version": 4,
        "applied_ts": TS,
        "applied_time": "2026-03-01T12:00:00.123+00:00",
        "applied_offsets": None,
        "applied_version": 4,
        "removed_ts": None,
    }
    assert values["tables"][1]["exists"] is False and values["tables"][1]["removed_ts"] == TS - 5
    assert values["tables"][3]["applied_offsets"] == {"t/0": 17, "t/1": 3}


def test_status_with_a_bad_configuration_exits_2_like_run(caplog, tmp_path):
    from ticdc_delta.jobs.cli import exit_status

    assert exit_status(["status", "--topics", "cdc"]) == 2
    assert "set exactly one of target.path" in caplog.text
    assert exit_status(["status", "--config", str(tmp_path / "nope.toml")]) == 2
    assert "cannot read config file" in caplog.text
