"""Decoding a Kafka partition's messages away from the driver (the Spark engine's executors).

An executor gets the protocol's options and the driver's decoder state at the start of the batch
(`WorkerSpec`), decodes its partition's messages in offset order with a decoder of its own, and
returns Arrow records (`STAGED_FIELDS`):

- `row`: a row change of a message that holds row changes only (a DML), its row images as bytes
  (`schema_cache.serialized`) and the name of its table structure (`schema_ref`);
- `schema`: a table structure the partition's rows name, once per partition (its bytes in `value`);
- `message`: any other message as it was read (key and value): BOOTSTRAP, DDL, watermarks,
  messages waiting for their structure, those whose structure the driver has not fetched, and
  those that failed to decode. The driver decodes them in order with its own decoder, which keeps
  the schema cache, the watermarks and the bad-input policy where they always were.

Because every message the executor cannot decode exactly as the driver would is handed to the
driver, correctness never depends on the executor's copy of the state being complete: a message
naming a structure it does not know goes to the driver, which knows it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ticdc_delta.exceptions import DecodeError, SchemaNotShipped
from ticdc_delta.schema_cache.decoder import Decoder
from ticdc_delta.schema_cache.events import RawMessage, RowChange, TableSchema
from ticdc_delta.schema_cache.options import ProtocolOptions
from ticdc_delta.schema_cache.protocols import create_worker_decoder
from ticdc_delta.schema_cache.serialized import dump_event, dump_row, schema_ref
from ticdc_delta.schema_cache.types import TypeOptions

# (name, Arrow type name, Spark SQL type): the records executors return.
STAGED_FIELDS = (
    ("kind", "string", "STRING"),
    ("topic", "string", "STRING"),
    ("partition", "int32", "INT"),
    ("offset", "int64", "BIGINT"),
    ("seq", "int32", "INT"),
    ("database", "string", "STRING"),
    ("table", "string", "STRING"),
    ("commit_ts", "int64", "BIGINT"),
    ("op", "string", "STRING"),
    ("schema_ref", "string", "STRING"),
    ("before", "binary", "BINARY"),
    ("after", "binary", "BINARY"),
    ("key", "binary", "BINARY"),
    ("value", "binary", "BINARY"),
)
ROW, SCHEMA, MESSAGE = "row", "schema", "message"
_BATCH_ROWS = 10_000


@dataclass(frozen=True)
class WorkerSpec:
    """What an executor needs to decode as the driver would at the start of a batch (picklable)."""

    protocol: ProtocolOptions
    types: TypeOptions
    state: bytes  # the driver decoder's `state()`
    shipped: bytes = b""  # what the driver fetched for it (the protocol's `worker_payload`)

    def decoder(self) -> Decoder:
        return create_worker_decoder(self.protocol, self.types, self.state, self.shipped)


def decode_messages(spec: WorkerSpec, messages: Iterable[RawMessage]) -> Iterator[tuple]:
    """Each message's records (tuples in `STAGED_FIELDS` order), in order."""
    decoder = spec.decoder()
    refs: dict[int, tuple[TableSchema, str]] = {}  # id(schema) -> (schema kept alive, its ref)
    sent: set[str] = set()
    for message in messages:
        position = message.position
        try:
            events = decoder.decode(message)
        except (DecodeError, SchemaNotShipped):
            events = None
        if not events or not all(e.__class__ is RowChange and e.position == position for e in events):
            # Not a plain DML of this very message (also: released rows of earlier messages).
            yield (MESSAGE, message.topic, message.partition, message.offset, 0, None, None, None, None, None,
                   None, None, message.key, message.value)
            continue
        for seq, event in enumerate(events):
            schema = event.schema
            known = refs.get(id(schema))
            if known is None:
                known = refs[id(schema)] = (schema, schema_ref(schema))
            ref = known[1]
            if ref not in sent:
                sent.add(ref)
                yield (SCHEMA, message.topic, message.partition, message.offset, -1, schema.name.database,
                       schema.name.table, None, None, ref, None, None, None, dump_event(schema))
            yield (ROW, message.topic, message.partition, message.offset, seq, event.table.database,
                   event.table.table, event.commit_ts, event.op.value, ref, dump_row(event.before),
                   dump_row(event.after), None, None)


def decode_arrow(spec: WorkerSpec, batches: Iterator) -> Iterator:
    """`mapInArrow` over Spark's Kafka source (topic, partition, offset, key, value): Arrow record batches."""
    import pyarrow as pa

    schema = pa.schema([(name, getattr(pa, kind)()) for name, kind, _ in STAGED_FIELDS])

    def messages() -> Iterator[RawMessage]:
        for batch in batches:
            columns = batch.to_pydict()
            yield from map(RawMessage, columns["topic"], columns["partition"], columns["offset"], columns["key"],
                           columns["value"])

    rows: list[tuple] = []
    for record in decode_messages(spec, messages()):
        rows.append(record)
        if len(rows) >= _BATCH_ROWS:
            yield _record_batch(pa, schema, rows)
            rows = []
    if rows:
        yield _record_batch(pa, schema, rows)


def _record_batch(pa, schema, rows: list[tuple]):
    columns = list(zip(*rows, strict=True))
    return pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)], schema=schema)
