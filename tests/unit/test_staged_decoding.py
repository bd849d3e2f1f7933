"""Decoding on executors (the Spark engine) gives exactly the driver's events (jobs/spark_engine/executor_decoding.py).

Each partition's messages are decoded by a worker decoder made from the driver's state at the batch's
start; the messages it hands back (`message` records) are then decoded by the driver, in partition and
offset order. Together they must give the row changes one decoder gives reading the stream in arrival
order, each exactly once, with the same structure; the driver must see every DDL, BOOTSTRAP and
watermark. No Spark here: the worker is plain Python.
"""

from __future__ import annotations

import pickle
from collections import Counter

import pytest

from testbed.demo import demo_changefeed
from testbed.encoders.canal import CanalJsonWriter
from testbed.encoders.debezium import DebeziumWriter
from testbed.encoders.open_protocol import OpenProtocolWriter
from testbed.encoders.ticdc_avro import TiCDCAvroWriter
from tests.workloads import ddl_evolution, items_feed
from ticdc_delta.jobs.spark_engine.executor_decoding import (
    MESSAGE,
    ROW,
    SCHEMA,
    STAGED_FIELDS,
    WorkerSpec,
    decode_arrow,
    decode_messages,
)
from ticdc_delta.schema_cache.events import RawMessage, RowChange
from ticdc_delta.schema_cache.protocols import create_decoder, protocol_options, worker_payload
from ticdc_delta.schema_cache.serialized import load_event, load_row
from ticdc_delta.schema_cache.ticdc_avro.options import RegistryOptions
from ticdc_delta.schema_cache.types import DEFAULT_OPTIONS

FIELDS = [name for name, _, _ in STAGED_FIELDS]


def _stream(feed) -> list[RawMessage]:
    offsets: Counter = Counter()
    messages = []
    for m in feed.messages:
        topic = m.topic or "cdc"
        messages.append(RawMessage(topic, m.partition, offsets[topic, m.partition], m.key, m.value))
        offsets[topic, m.partition] += 1
    return messages


def _row_key(event: RowChange, seq: int) -> tuple:
    return (event.position, seq, event.table, event.commit_ts, event.op.value, event.before, event.after, event.schema)


def _by_arrival(options, messages) -> tuple[list, list]:
    decoder = create_decoder(options, DEFAULT_OPTIONS)
    rows, others = [], []
    for message in messages:
        events = decoder.decode(message)
        seqs: Counter = Counter()
        for event in events:
            if isinstance(event, RowChange):
                rows.append(_row_key(event, seqs[event.position]))
                seqs[event.position] += 1
            else:
                others.append(event)
    return rows, others


def _staged(options, messages, state: bytes = b"", shipped: bytes = b"") -> tuple[list, list, Counter]:
    driver = create_decoder(options, DEFAULT_OPTIONS)
    if state:
        driver.restore(state)
    spec = WorkerSpec(options, DEFAULT_OPTIONS, state or driver.state(), shipped)
    records = []
    for partition in sorted({(m.topic, m.partition) for m in messages}):
        records += [dict(zip(FIELDS, r, strict=True)) for r in decode_messages(spec, [m for m in messages if (m.topic, m.partition) == partition])]
    kinds = Counter(r["kind"] for r in records)
    schemas = {r["schema_ref"]: load_event(r["value"]) for r in records if r["kind"] == SCHEMA}
    rows = []
    for r in records:
        if r["kind"] == ROW:
            event = RowChange(None, 0, None, None, None, None, (r["topic"], r["partition"], r["offset"]))
            schema = schemas[r["schema_ref"]]
            rows.append((event.position, r["seq"], schema.name, r["commit_ts"], r["op"], load_row(r["before"]),
                         load_row(r["after"]), schema))
    others = []
    handed_back = sorted((r for r in records if r["kind"] == MESSAGE), key=lambda r: (r["topic"], r["partition"], r["offset"]))
    for r in handed_back:
        events = driver.decode(RawMessage(r["topic"], r["partition"], r["offset"], r["key"], r["value"]))
        seqs: Counter = Counter()
        for event in events:
            if isinstance(event, RowChange):
                rows.append(_row_key(event, seqs[event.position]))
                seqs[event.position] += 1
            else:
                others.append(event)
    return rows, others, kinds


def _ddl_feed(**writers):
    return ddl_evolution(items_feed(**writers), carries_defaults=not writers.get("canal_writer") and not writers.get("open_writer"))


CASES = {
    "simple-json": (lambda: _ddl_feed(), "simple", {}),
    "simple-avro": (lambda: _ddl_feed(encoding="avro"), "simple", {"encoding": "avro"}),
    "debezium": (lambda: _ddl_feed(debezium_writer=DebeziumWriter()), "debezium", {"enable_tidb_extension": True}),
    "canal-json": (lambda: _ddl_feed(canal_writer=CanalJsonWriter(content_compatible=True)), "canal-json",
                   {"enable_tidb_extension": True}),
    "open-protocol": (lambda: _ddl_feed(open_writer=OpenProtocolWriter()), "open-protocol", {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_executors_and_the_driver_together_decode_exactly_what_one_decoder_does(case):
    # Setup: a stream with BOOTSTRAP/CREATE, DDL of every kind and rows before and after each, in 3 partitions.
    # Expect: the same row changes (position, values, structure) exactly once; every other event the
    # driver's; every row decoded by a worker, every other message handed back.
    make_feed, name, settings = CASES[case]
    options = protocol_options(name, settings)
    messages = _stream(make_feed())

    expected_rows, expected_others = _by_arrival(options, messages)
    rows, others, kinds = _staged(options, messages)

    assert sorted(rows, key=repr) == sorted(expected_rows, key=repr)
    assert Counter(map(repr, others)) == Counter(map(repr, expected_others))
    # Every row here comes from a worker (its structure precedes it in its partition); only the other
    # messages go back.
    assert kinds[ROW] == len(expected_rows) and kinds[MESSAGE] == len(messages) - len({r[0] for r in expected_rows})


def test_rows_before_their_structure_are_the_drivers_to_park_and_release():
    # Setup: Simple rows sent before the DDL that gives their structure, in every partition (a consumer
    # that started mid-stream sees that order).
    # Expect: the workers hand back the rows (no structure) and the DDL (it releases rows of other
    # messages); the driver parks and releases them: every row exactly once, as one decoder gives them.
    feed = items_feed()
    with feed.transaction() as txn:
        for i in range(9):
            txn.insert("shop", "items", {"id": i, "name": f"n{i}"})
    feed.messages[:] = [m for m in feed.messages if m.kind == "DML"] + [m for m in feed.messages if m.kind != "DML"]
    options = protocol_options("simple")
    messages = _stream(feed)

    expected_rows, _ = _by_arrival(options, messages)
    rows, _, kinds = _staged(options, messages)

    assert len(expected_rows) == 9 and kinds[ROW] == 0
    assert sorted(rows, key=repr) == sorted(expected_rows, key=repr)


def test_avro_rows_whose_schema_the_driver_has_not_fetched_are_handed_back(registry):
    # Setup: the avro demo stream; workers get the driver's state and the schemas it fetched so far.
    # Expect: before any fetch, every message goes back to the driver (no worker calls the registry);
    # once the driver has decoded them, the schemas it ships let workers decode the rest of the stream.
    writer = TiCDCAvroWriter(registry.url, enable_tidb_extension=True)
    feed = demo_changefeed(seed=3, changes=60, avro_writer=writer, topic_prefix="staged")
    options = protocol_options("avro", {"enable_tidb_extension": True}, registry=RegistryOptions(url=registry.url))
    messages = _stream(feed)
    asked = len(registry.requests)

    _, _, cold = _staged(options, messages)
    assert cold[ROW] == 0 and cold[MESSAGE] == len(messages)
    assert len(registry.requests) > asked  # the driver fetched them

    driver = create_decoder(options, DEFAULT_OPTIONS)
    for message in messages:
        driver.decode(message)
    asked = len(registry.requests)
    rows, _, warm = _staged(options, messages, driver.state(), worker_payload(options, driver))
    expected_rows, _ = _by_arrival(options, messages)
    assert warm[ROW] == len(expected_rows) and sorted(rows, key=repr) == sorted(expected_rows, key=repr)


def test_arrow_records_carry_the_same_records():
    pa = pytest.importorskip("pyarrow")
    options = protocol_options("simple")
    messages = _stream(_ddl_feed())
    spec = WorkerSpec(options, DEFAULT_OPTIONS, create_decoder(options, DEFAULT_OPTIONS).state())
    batch = pa.RecordBatch.from_pydict({
        "topic": [m.topic for m in messages], "partition": [m.partition for m in messages],
        "offset": [m.offset for m in messages], "key": [m.key for m in messages], "value": [m.value for m in messages],
    })
    by_partition = [m for m in messages if m.partition == 0]
    one = pa.RecordBatch.from_pydict({
        "topic": [m.topic for m in by_partition], "partition": [m.partition for m in by_partition],
        "offset": [m.offset for m in by_partition], "key": [m.key for m in by_partition],
        "value": [m.value for m in by_partition],
    })
    arrow = [r for b in decode_arrow(spec, iter([one])) for r in zip(*b.to_pydict().values(), strict=True)]
    assert arrow == list(decode_messages(spec, by_partition))
    assert batch.num_rows == len(messages)


def test_staged_values_refuse_what_no_decoder_makes():
    # A staged value naming any other class (a tampered staging table) is refused: unpickling can run code.
    import collections
    import os

    with pytest.raises(pickle.UnpicklingError, match="names collections.OrderedDict, which no decoder produces"):
        load_row(pickle.dumps((1, collections.OrderedDict())))
    with pytest.raises(pickle.UnpicklingError, match="names posix.system"):
        load_row(pickle.dumps((1, os.system)))
    with pytest.raises(pickle.UnpicklingError):
        load_event(pickle.dumps((1, 2)))
