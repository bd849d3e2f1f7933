"""One upstream workload over every type, and helpers to decode a changefeed's messages.

Shared by the protocol tests: the same operations through two protocols must
decode to the same row changes wherever both protocols carry the information.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from testbed.changefeed import Changefeed
from testbed.tables import column
from ticdc_delta.schema_cache.canal.decoder import CanalJsonDecoder
from ticdc_delta.schema_cache.canal.options import CanalJsonOptions
from ticdc_delta.schema_cache.debezium.decoder import DebeziumDecoder
from ticdc_delta.schema_cache.debezium.options import DebeziumOptions
from ticdc_delta.schema_cache.events import RawMessage, RowChange
from ticdc_delta.schema_cache.open_protocol.decoder import OpenProtocolDecoder
from ticdc_delta.schema_cache.open_protocol.options import OpenProtocolOptions
from ticdc_delta.schema_cache.protocols import create_decoder
from ticdc_delta.schema_cache.ticdc_avro.decoder import TiCDCAvroDecoder
from ticdc_delta.schema_cache.ticdc_avro.options import AvroOptions, RegistryOptions
from ticdc_delta.schema_cache.types import DEFAULT_OPTIONS

UTC = dt.timezone.utc
COLUMNS = [
    column("id", "bigint", nullable=False, unsigned=True),
    column("i8", "tinyint"),
    column("u16", "smallint", unsigned=True),
    column("u32", "int", unsigned=True),
    column("price", "decimal", length=12, decimal=3),
    column("f", "float"),
    column("d", "double"),
    column("name", "varchar"),
    column("raw", "varbinary"),
    column("day", "date"),
    column("at", "datetime"),
    column("at6", "datetime", decimal=6),
    column("ts", "timestamp", decimal=3),
    column("t", "time", decimal=3),
    column("y", "year"),
    column("flag", "bit", length=1),
    column("bits", "bit", length=12),
    column("size", "enum", elements=["s", "m,l"]),
    column("tags", "set", elements=["a", "b", "c"]),
    column("doc", "json"),
]
ROW = {
    "id": 2**64 - 1,
    "i8": -128,
    "u16": 65535,
    "u32": 4294967295,
    "price": Decimal("-123456789.125"),
    "f": 1.5,
    "d": -2.25,
    "name": "ünï 😀",
    "raw": b"\x00\xff\x00",
    "day": "1000-01-01",
    "at": dt.datetime(2024, 1, 2, 3, 4, 5),
    "at6": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
    "ts": dt.datetime(2024, 6, 1, 12, 0, 0, 123000, tzinfo=UTC),
    "t": "-12:34:56.789",
    "y": 2155,
    "flag": 1,
    "bits": 0xABC,
    "size": "m,l",
    "tags": "a,c",
    "doc": '{"k": [1, 2]}',
}


def workload(feed: Changefeed) -> Changefeed:
    feed.create_table("shop", "all_types", COLUMNS, primary_key=["id"])
    with feed.transaction() as txn:
        txn.insert("shop", "all_types", ROW)
        txn.insert("shop", "all_types", {"id": 1})
    with feed.transaction() as txn:
        txn.update("shop", "all_types", [2**64 - 1], {"name": "renamed", "price": Decimal("0.001")})
        txn.delete("shop", "all_types", [1])
    return feed


def canal_decoder(**options) -> CanalJsonDecoder:
    """A canal-json decoder; the TiDB extension is on unless said otherwise."""
    return CanalJsonDecoder(CanalJsonOptions(**{"enable_tidb_extension": True, **options}))


def debezium_decoder(**options) -> DebeziumDecoder:
    """A debezium decoder; the TiDB extension is on unless said otherwise."""
    return DebeziumDecoder(DebeziumOptions(**{"enable_tidb_extension": True, **options}))


def open_decoder(**options) -> OpenProtocolDecoder:
    return OpenProtocolDecoder(OpenProtocolOptions(**options))


def avro_decoder(registry_url: str, *, max_wait_seconds: float = 5, **options) -> TiCDCAvroDecoder:
    """TiCDC's avro decoder reading the registry at `registry_url` with confluent-kafka's client."""
    registry = RegistryOptions(url=registry_url, max_wait_seconds=max_wait_seconds)
    options = AvroOptions(**options, registry=registry)
    return create_decoder(options, DEFAULT_OPTIONS)  # type: ignore[return-value]


def decode(decoder, feed: Changefeed) -> list:
    offsets: dict[int, int] = {}
    events = []
    for message in feed.messages:
        offset = offsets.get(message.partition, 0)
        offsets[message.partition] = offset + 1
        events.extend(decoder.decode(RawMessage("cdc", message.partition, offset, message.key, message.value)))
    return events


def rows(events) -> list[tuple]:
    return sorted(
        ((e.commit_ts, e.op.value, e.before, e.after) for e in events if isinstance(e, RowChange)),
        key=repr,
    )
