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


def test_what_waited_at_the_checkpoint_and_for_what():
    # Setup: the checkpoint's waits (`jobs.waits`): rows of shop.items on cdc/1 held by topic cdc_b's partitions,
    # a row parked on cdc/0 for its schema; the newest watermark 90 s after the oldest wait.
    # Expect: a section per partition (events, oldest commitTs, how far behind, table, kind), then what holds
    # each, in the text; both in the JSON.
    from ticdc_delta.apply.ordering.completeness import Completeness
    from ticdc_delta.apply.ordering.gate import Waiting
    from ticdc_delta.jobs.waits import decode, encode, waits
    from ticdc_delta.schema_cache.events import Position, RawMessage, TableName, Watermark
    from ticdc_delta.schema_cache.events import TopicPartition as TP
    from ticdc_delta.schema_cache.parking import ParkedMessage

    newest = TS + (90_000 << 18)
    completeness = Completeness({"cdc": [0, 1], "cdc_b": [0, 1]})
    for tp in ("cdc", 0), ("cdc", 1):
        completeness.watermark(Watermark(newest, Position(*tp, 5)))
    items, logs = TableName("shop", "items"), TableName("shop", "logs")
    parked = ParkedMessage(RawMessage("cdc", 0, 7, None, b""), logs, TS + (1000 << 18), 0.0)
    found = waits({TP("cdc", 1): Waiting(3, TS, items, "row")}, [parked], completeness)
    saved = decode(encode(found, completeness.newest()))
    text = render(report(waiting=saved))
    assert text.endswith(
        f"waiting at the checkpoint (newest watermark read: {newest}):\n"
        "partition  events     oldest commitTs  behind  table       kind\n"
        f"cdc/1           3  {TS}    90 s  shop.items  row\n"
        f"cdc/0           1  {TS + (1000 << 18)}    89 s  shop.logs   row (parked)\n"
        "  cdc/1: waits for a watermark or a look at the end of topic cdc_b (partitions 0, 1: complete through 0, "
        "its last watermark 0)\n"
        "  cdc/0: waits for its schema (the BOOTSTRAP or DDL of its schema version)\n"
    ), text
    values = json.loads(json.dumps(to_json(report(waiting=saved))))
    assert values["newest_watermark"] == newest
    assert values["waiting"][0] == {"partition": "cdc/1", "events": 3, "oldest_ts": TS, "table": "shop.items",
                                    "kind": "row", "waits_for": found[0].waits_for}
    assert to_json(report())["waiting"] == []


def test_a_long_wait_and_a_silent_topic_are_each_named_once(caplog):
    from ticdc_delta.apply.ordering.completeness import Completeness
    from ticdc_delta.apply.ordering.gate import Waiting
    from ticdc_delta.jobs.waits import WaitWarnings, waits
    from ticdc_delta.schema_cache.events import Position, TableName, Watermark
    from ticdc_delta.schema_cache.events import TopicPartition as TP

    completeness = Completeness({"a": [0], "b": [0]}, silent_rounds=2)
    items = TableName("shop", "items")
    completeness.table_seen("b", TableName("shop", "logs"))
    completeness.watermark(Watermark(TS, Position("b", 0, 0)))
    warnings = WaitWarnings(60)
    caplog.set_level("WARNING", logger="ticdc_delta")
    for seconds in (30, 61, 62, 63):
        completeness.watermark(Watermark(TS + (seconds * 1000 << 18), Position("a", 0, seconds)))
        warnings.round_ended(waits({TP("a", 0): Waiting(1, TS + 1, items, "row")}, [], completeness), completeness)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("topic b has had no watermark while the newest reached")
    assert lines[1].startswith(f"shop.items: a row change at commitTs {TS + 1} (61 s older than the newest watermark) "
                               "waits on a/0 for a watermark or a look at the end of topic b")
