"""The other protocols' decoders against the raw parse of the same messages (for bench.py's decode section).

Each stream is the benchmark table's workload through the TiCDC stand-in (`testbed.changefeed`) with
that protocol's encoder; the raw parse is what any consumer must do at least: orjson for the JSON
protocols (Open Protocol: its length-prefixed framing, then orjson per item), fastavro's schemaless
reader for TiCDC's avro protocol (schemas fetched once, as the decoder caches them).
"""

from __future__ import annotations

import datetime as dt
import io
import random
import struct
from collections.abc import Callable
from decimal import Decimal

import fastavro
import orjson

from benchmarks import streams
from testbed.changefeed import Changefeed
from testbed.encoders.canal import CanalJsonWriter
from testbed.encoders.debezium import DebeziumWriter
from testbed.encoders.open_protocol import OpenProtocolWriter
from testbed.encoders.ticdc_avro import TiCDCAvroWriter
from tests.decoding import avro_decoder, canal_decoder, debezium_decoder, open_decoder
from ticdc_delta.schema_cache.events import RawMessage
from ticdc_delta.schema_cache.open_protocol.decoder import split_items


def _workload(feed: Changefeed, events: int, keys: int) -> Changefeed:
    rng = random.Random(7)
    feed.create_table(*streams.TABLE, streams.SCHEMA["columns"], primary_key=["id"])
    live: set[int] = set()
    for n in range(0, events, streams.TXN_SIZE):
        with feed.transaction() as txn:
            touched: set[int] = set()
            for i in range(n, min(n + streams.TXN_SIZE, events)):
                key = rng.randrange(keys)
                if key in touched:
                    continue
                touched.add(key)
                row = {
                    "id": key,
                    "name": f"name-{key}-{i}",
                    "amount": Decimal(rng.randrange(10**8)) / 100,
                    "qty": rng.randrange(1000),
                    "at": dt.datetime(2026, 1, 1, 10, 0, i % 60, i % 1_000_000),
                    "ts": dt.datetime(2026, 1, 1, 10, 0, i % 60, (i % 1000) * 1000, tzinfo=dt.timezone.utc),
                    "note": "x" * rng.randrange(40),
                }
                if key not in live:
                    txn.insert(*streams.TABLE, row)
                    live.add(key)
                elif rng.random() < 0.1:
                    txn.delete(*streams.TABLE, [key])
                    live.discard(key)
                else:
                    txn.update(*streams.TABLE, [key], {k: v for k, v in row.items() if k != "id"})
    return feed


def _raw(feed: Changefeed) -> list[RawMessage]:
    return [RawMessage(m.topic or "bench", m.partition, i, m.key, m.value) for i, m in enumerate(feed.messages)]


def _json_parse(message: RawMessage) -> object:
    return orjson.loads(message.value) if message.value is not None else None


def _open_parse(message: RawMessage) -> list:
    items = [orjson.loads(item) for item in split_items(message.key[8:])]
    # resolved events carry no value
    items += [orjson.loads(item) for item in split_items(message.value or b"") if item]
    return items


def _avro_parse(messages: list[RawMessage], registry_url: str) -> Callable[[RawMessage], object]:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    client = SchemaRegistryClient({"url": registry_url})
    parsed: dict[int, object] = {}

    def schema(framed: bytes):
        schema_id = struct.unpack(">I", framed[1:5])[0]
        if schema_id not in parsed:
            parsed[schema_id] = fastavro.parse_schema(orjson.loads(client.get_schema(schema_id).schema_str))
        return parsed[schema_id]

    for m in messages:  # schemas fetched once, as the decoder caches them
        schema(m.key)
        if m.value is not None:
            schema(m.value)

    def parse(message: RawMessage) -> tuple:
        key = fastavro.schemaless_reader(io.BytesIO(message.key[5:]), schema(message.key), None)
        if message.value is None:
            return key, None
        return key, fastavro.schemaless_reader(io.BytesIO(message.value[5:]), schema(message.value), None)

    return parse


def protocol_contenders(events: int, keys: int) -> dict[str, tuple[Callable, list[RawMessage], tuple[str, Callable]]]:
    """protocol -> (a factory of its decode function, its messages, (what the raw parse is, parse one message))."""
    from tests.registry_server import FakeSchemaRegistry

    out = {}
    debezium = _raw(_workload(Changefeed(streams.PARTITIONS, debezium_writer=DebeziumWriter()), events, keys))
    out["debezium"] = (lambda: debezium_decoder().decode, debezium, ("orjson.loads", _json_parse))
    canal = _raw(
        _workload(Changefeed(streams.PARTITIONS, canal_writer=CanalJsonWriter(content_compatible=True)), events, keys)
    )
    out["canal-json"] = (lambda: canal_decoder().decode, canal, ("orjson.loads", _json_parse))
    opened = _raw(_workload(Changefeed(streams.PARTITIONS, open_writer=OpenProtocolWriter()), events, keys))
    out["open-protocol"] = (lambda: open_decoder().decode, opened, ("framing + orjson.loads", _open_parse))

    registry = FakeSchemaRegistry()
    registry.start()
    writer = TiCDCAvroWriter(registry.url, enable_tidb_extension=True)
    avro = _raw(_workload(Changefeed(streams.PARTITIONS, avro_writer=writer), events, keys))
    warm = avro_decoder(registry.url, enable_tidb_extension=True)
    for m in avro:  # schemas fetched once, as the decoder caches them
        warm.decode(m)
    out["avro"] = (lambda: warm.decode, avro, ("fastavro.schemaless_reader", _avro_parse(avro, registry.url)))
    return out
