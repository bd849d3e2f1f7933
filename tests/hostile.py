"""Hostile input for the decoders: valid messages of every protocol, ways to spoil them, and what must hold.

Shared by the property-based tests (tests/unit/test_hostile_input.py, where hypothesis makes the
choices) and the fault script's fuzz section (benchmarks/fault_fuzz.py, where `random.Random` makes
them), so both spoil messages the same ways. Nothing here imports hypothesis: every random choice
goes through a `Chooser`.

- `build_cases` makes each protocol's valid stream with the stand-in encoders (`testbed/`), one case
  per decoder configuration, including TiCDC's large-message handling (lz4/snappy, claim-check).
- `MUTATIONS` turn one valid message into a hostile one: random bytes, truncation, byte changes,
  structural changes of the JSON or Avro inside (wrong types, huge numbers, deep nesting, invalid
  UTF-8, oversized fields, missing and extra keys), framing lengths, registry schemas that do not
  parse, claim-check files that are not what they claim.
- `problems` says why a decoded event could not be applied: a value that does not fit its column's
  Spark type (as `schema_cache.types` maps it), a missing key, a commitTs Delta cannot record.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as dt
import io
import json
import math
import re
import signal
import struct
import uuid
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Protocol

import cramjam
import fastavro
import orjson

from testbed.changefeed import Changefeed
from testbed.encoders.canal import CanalJsonWriter
from testbed.encoders.debezium import DebeziumWriter
from testbed.encoders.large_messages import compress
from testbed.encoders.open_protocol import OpenProtocolWriter
from testbed.encoders.simple import claim_check
from testbed.encoders.ticdc_avro import TiCDCAvroWriter
from testbed.tables import column
from tests import decoding
from tests.registry_server import FakeSchemaRegistry
from ticdc_delta.schema_cache.decoder import Decoder
from ticdc_delta.schema_cache.events import Op, RawMessage, RowChange, SchemaChange, TableSchema, Watermark
from ticdc_delta.schema_cache.protocols import create_decoder, protocol_options
from ticdc_delta.schema_cache.simple import avro as simple_avro
from ticdc_delta.schema_cache.ticdc_avro.decoder import TiCDCAvroDecoder
from ticdc_delta.schema_cache.ticdc_avro.options import AvroOptions, RegistryOptions
from ticdc_delta.schema_cache.ticdc_avro.registry import SchemaRegistry
from ticdc_delta.schema_cache.types import DEFAULT_OPTIONS

# One decode call may take this long before it counts as a hang. Generous: the slowest hostile
# message here (a 1 MiB field) decodes in milliseconds; a machine under CI load is far from 2 s.
DECODE_TIME_BOUND_SECONDS = 2.0
# "Oversized": far beyond any real column value TiCDC would put in one field, yet quick to build.
# Read at each mutation: the fault script lowers it to keep a million messages within minutes.
OVERSIZED_BYTES = 1 << 20
# "Deep nesting": as many nested arrays as the issue asks for; parsers must refuse, not recurse.
DEEP_NESTING = 100_000


class Chooser(Protocol):
    """Where a mutation's random choices come from (hypothesis' data, or a seeded `random.Random`)."""

    def below(self, n: int) -> int:
        """An integer in [0, n)."""
        ...

    def binary(self, max_size: int) -> bytes: ...


class RandomChooser:
    def __init__(self, rng) -> None:
        self._rng = rng

    def below(self, n: int) -> int:
        return self._rng.randrange(n)

    def binary(self, max_size: int) -> bytes:
        size = self._rng.randrange(max_size + 1)
        return self._rng.getrandbits(8 * size).to_bytes(size, "little")  # also for hypothesis' randoms


def pick(chooser: Chooser, options: Sequence):
    return options[chooser.below(len(options))]


# --- the valid streams ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    """One decoder configuration and a valid stream for it.

    `shape` says how the messages are built: json (value, and debezium's key), simple-avro,
    confluent-avro (key and value framed, schemas in `registry`) or open (batched framing);
    `compression` is applied to every value (open: to every value item).
    """

    name: str
    messages: tuple[RawMessage, ...]
    new_decoder: Callable[[], Decoder]
    shape: str
    compression: str = "none"
    claim_root: Path | None = None
    registry: FakeSchemaRegistry | None = None


def _workload(feed: Changefeed) -> Changefeed:
    """Every TiDB type (tests.decoding's workload), then an added column and a row using it."""
    decoding.workload(feed)
    feed.add_column("shop", "all_types", column("extra", "int"))
    with feed.transaction() as txn:
        txn.insert("shop", "all_types", {**decoding.ROW, "id": 5, "extra": 7})
    return feed


def _raw(feed: Changefeed, *, value=lambda v: v) -> tuple[RawMessage, ...]:
    return tuple(
        RawMessage(m.topic or "cdc", m.partition, offset, m.key, None if m.value is None else value(m.value))
        for offset, m in enumerate(feed.messages)
    )


def _options_decoder(name: str, **values) -> Callable[[], Decoder]:
    """A factory of fresh decoders built the way the job builds them (`schema_cache.protocols`)."""
    options = protocol_options(name, values)
    return lambda: create_decoder(options)


def build_cases(workdir: Path, registry: FakeSchemaRegistry) -> dict[str, Case]:
    """Every decoder configuration under test, by name. `registry` must be started."""
    cases: list[Case] = []
    simple_json = _raw(_workload(Changefeed(3)))
    cases.append(Case("simple-json", simple_json, _options_decoder("simple"), "json"))
    cases.append(
        Case("simple-avro", _raw(_workload(Changefeed(3, encoding="avro"))), _options_decoder("simple", encoding="avro"), "simple-avro")
    )
    cases.append(_avro_case(registry))
    debezium = _options_decoder("debezium", enable_tidb_extension=True)
    cases.append(Case("debezium", _raw(_workload(Changefeed(3, debezium_writer=DebeziumWriter()))), debezium, "json"))
    no_schema = _raw(_workload(Changefeed(3, debezium_writer=DebeziumWriter(with_schema=False))))
    cases.append(Case("debezium-no-schema", no_schema, debezium, "json"))
    canal = CanalJsonWriter(content_compatible=True)
    canal_decoder = _options_decoder("canal-json", enable_tidb_extension=True)
    cases.append(Case("canal-json", _raw(_workload(Changefeed(3, canal_writer=canal))), canal_decoder, "json"))
    cases.append(Case("open-protocol", _raw(_workload(Changefeed(3, open_writer=OpenProtocolWriter()))), _options_decoder("open-protocol"), "open"))
    cases.extend(_large_message_cases(workdir, simple_json))
    return {case.name: case for case in cases}


def _avro_case(registry: FakeSchemaRegistry) -> Case:
    writer = TiCDCAvroWriter(registry.url, enable_tidb_extension=True)
    messages = _raw(_workload(Changefeed(3, avro_writer=writer)))
    options = AvroOptions(
        enable_tidb_extension=True,
        keep_extension_columns=True,  # the extension columns' values are checked too
        registry=RegistryOptions(url=registry.url, max_wait_seconds=0.5),
    )
    # One client for every fresh decoder: schemas the registry served are not fetched again
    # (a decoder's own caches start empty, as after a restart).
    shared = SchemaRegistry(options.registry)
    return Case(
        "avro",
        messages,
        lambda: TiCDCAvroDecoder(options, DEFAULT_OPTIONS, shared),
        "confluent-avro",
        registry=registry,
    )


def _large_message_cases(workdir: Path, simple_json: Sequence[RawMessage]) -> list[Case]:
    cases = []
    lz4 = _options_decoder("simple", large_message_compression="lz4")
    cases.append(
        Case("simple-json-lz4", tuple(m._replace(value=compress("lz4", m.value)) for m in simple_json), lz4, "json", "lz4")
    )
    snappy = CanalJsonWriter(content_compatible=True, compression="snappy")
    cases.append(
        Case(
            "canal-json-snappy",
            _raw(_workload(Changefeed(3, canal_writer=snappy))),
            _options_decoder("canal-json", enable_tidb_extension=True, large_message_compression="snappy"),
            "json",
            "snappy",
        )
    )
    cases.append(
        Case(
            "open-protocol-lz4",
            _raw(_workload(Changefeed(3, open_writer=OpenProtocolWriter(compression="lz4")))),
            _options_decoder("open-protocol", large_message_compression="lz4"),
            "open",
            "lz4",
        )
    )
    # Claim-check: every row message over 200 bytes went to the store (all of this workload's rows).
    store = workdir / "claims"
    store.mkdir(parents=True, exist_ok=True)
    root = f"file://{store}"
    claimed = tuple(m._replace(value=claim_check(m.value, store, 200)) for m in simple_json)
    cases.append(
        Case("simple-json-claim-check", claimed, _options_decoder("simple", claim_check_root=root), "json", claim_root=store)
    )
    canal = CanalJsonWriter(content_compatible=True, compression="lz4", claim_check_dir=store, claim_check_over_bytes=200)
    cases.append(
        Case(
            "canal-json-claim-check",
            _raw(_workload(Changefeed(3, canal_writer=canal))),
            _options_decoder("canal-json", enable_tidb_extension=True, large_message_compression="lz4", claim_check_root=root),
            "json",
            "lz4",
            claim_root=store,
        )
    )
    opened = OpenProtocolWriter(compression="snappy", claim_check_dir=store, claim_check_over_bytes=200)
    cases.append(
        Case(
            "open-protocol-claim-check",
            _raw(_workload(Changefeed(3, open_writer=opened))),
            _options_decoder("open-protocol", large_message_compression="snappy", claim_check_root=root),
            "open",
            "snappy",
            claim_root=store,
        )
    )
    return cases


# --- what a decoded event must satisfy ---------------------------------------------------------------

# Delta records commitTs as a signed 64-bit number (Delta's txnVersion, the product's BIGINT columns).
MAX_COMMIT_TS = (1 << 63) - 1
_INTEGER_BITS = {"TINYINT": 8, "SMALLINT": 16, "INT": 32, "BIGINT": 64}
# Doubles from here up become infinity as float32 (its largest value plus half a step).
_FLOAT32_OVERFLOW = (2 - 2**-24) * 2.0**127
_DECIMAL_TYPE = re.compile(r"DECIMAL\((\d+),(\d+)\)")
_PLAIN_TYPES = {"TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "STRING", "BINARY", "BOOLEAN",
                "DATE", "TIMESTAMP", "TIMESTAMP_NTZ", "VARIANT"}


def type_problem(spark_type: str) -> str | None:
    """Why `spark_type` is not a type Spark can create a column of, or None."""
    if spark_type in _PLAIN_TYPES:
        return None
    match = _DECIMAL_TYPE.fullmatch(spark_type)
    if match and 1 <= int(match.group(1)) <= 38 and int(match.group(2)) <= int(match.group(1)):
        return None
    return f"not a Spark column type: {spark_type!r}"


def _text_problem(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return f"text Spark cannot store ({err})"
    return None


def _brief(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}...({len(text)} characters)"


def value_problem(value: object, spark_type: str) -> str | None:
    """Why `value` cannot go into a column of `spark_type` unchanged, or None when it fits.

    What the decoders' converters (`schema_cache.types`) must return for each Spark type, with the
    range of that type: PySpark's DataFrame checks Python types and integer ranges, but would turn
    an overflowing decimal into NULL and a too-large FLOAT into infinity without a word.
    """
    if value is None:
        return None  # every Delta column is nullable
    kind = value.__class__
    if spark_type in _INTEGER_BITS:
        bits = _INTEGER_BITS[spark_type]
        if kind is not int:
            return f"{kind.__name__} for {spark_type}"
        return None if -(1 << (bits - 1)) <= value < 1 << (bits - 1) else f"{_brief(value)} outside {spark_type}"
    if spark_type in ("FLOAT", "DOUBLE"):
        if kind is not float:
            return f"{kind.__name__} for {spark_type}"
        if not math.isfinite(value):
            return f"{value} in {spark_type} (TiDB has no NaN or infinity)"
        return f"{_brief(value)} outside FLOAT" if spark_type == "FLOAT" and abs(value) >= _FLOAT32_OVERFLOW else None
    if spark_type in ("STRING", "VARIANT"):
        return f"{kind.__name__} for {spark_type}" if kind is not str else _text_problem(value)
    if spark_type == "BINARY":
        return None if kind in (bytes, bytearray) else f"{kind.__name__} for BINARY"
    if spark_type == "BOOLEAN":
        return None if kind is bool else f"{kind.__name__} for BOOLEAN"
    if spark_type == "DATE":
        return None if kind is dt.date else f"{kind.__name__} for DATE"
    if spark_type in ("TIMESTAMP", "TIMESTAMP_NTZ"):
        if kind is not dt.datetime:
            return f"{kind.__name__} for {spark_type}"
        aware = value.tzinfo is not None
        return None if aware == (spark_type == "TIMESTAMP") else f"{'aware' if aware else 'naive'} datetime for {spark_type}"
    match = _DECIMAL_TYPE.fullmatch(spark_type)
    if match:
        return _decimal_problem(value, int(match.group(1)), int(match.group(2)))
    return f"unknown Spark type {spark_type!r}"


def _decimal_problem(value: object, precision: int, scale: int) -> str | None:
    if value.__class__ is not Decimal:
        return f"{value.__class__.__name__} for DECIMAL({precision},{scale})"
    if not value.is_finite():
        return f"{_brief(value)} for DECIMAL({precision},{scale})"
    _, digits, exponent = value.as_tuple()
    # Digits below the scale would be rounded away by Spark; trailing zeros are harmless.
    if exponent < -scale and any(digits[exponent + scale :] if exponent + scale < 0 else ()):
        return f"{_brief(value)} has more than {scale} decimal places"
    if value and value.adjusted() >= precision - scale:
        return f"{_brief(value)} has more than {precision - scale} integer digits"
    return None


def _schema_problems(schema: TableSchema) -> list[str]:
    out = []
    for col in schema.columns:
        problem = type_problem(col.spark_type)
        if problem is None:
            problem = value_problem(col.default, col.spark_type)
            if problem is not None:
                problem = f"default {problem}"
        if problem is not None:
            out.append(f"{schema.name}.{col.name}: {problem}")
        elif (text := _text_problem(col.name)) is not None:
            out.append(f"column name: {text}")
    missing = [k for k in schema.key if k not in schema.column_names()]
    if missing:
        out.append(f"key columns {missing} are not columns")
    folded = [n.lower() for n in schema.column_names()]
    if len(set(folded)) != len(folded) or len(set(schema.key)) != len(schema.key):
        out.append("a column named twice (Spark compares names ignoring case)")
    for part in (schema.name.database, schema.name.table):
        if (text := _text_problem(part)) is not None:
            out.append(f"table name: {text}")
    return out


def _commit_ts_problem(commit_ts: object) -> str | None:
    if commit_ts.__class__ is not int or not 0 <= commit_ts <= MAX_COMMIT_TS:
        return f"commitTs {_brief(commit_ts)} is not a TiDB timestamp Delta can record"
    return None


def _image_problems(image: tuple | None, schema: TableSchema, *, key_needed: bool, what: str) -> list[str]:
    if image is None:
        return [f"no {what} image"] if key_needed else []
    if len(image) != len(schema.columns):
        return [f"{what} image has {len(image)} values for {len(schema.columns)} columns"]
    out = []
    for value, col in zip(image, schema.columns, strict=True):
        problem = value_problem(value, col.spark_type)
        if problem is not None:
            out.append(f"{what} {col.name}: {problem}")
    if key_needed:
        # MERGE finds the row by key: a NULL key matches nothing and would insert a row no later change can find.
        out += [f"{what} key column {schema.columns[i].name} is NULL" for i in schema.key_indexes() if image[i] is None]
    return out


def problems(event: object) -> list[str]:
    """Why `event` could not be applied as it is (empty when it can)."""
    if isinstance(event, Watermark):
        return [p for p in [_commit_ts_problem(event.commit_ts)] if p]
    if isinstance(event, SchemaChange):
        found = [p for p in [_commit_ts_problem(event.commit_ts)] if p]
        return found + (_schema_problems(event.schema) if event.schema is not None else [])
    if not isinstance(event, RowChange):
        return [f"not an event: {type(event).__name__}"]
    schema = event.schema
    found = [p for p in [_commit_ts_problem(event.commit_ts)] if p] + _schema_problems(schema)
    if not schema.key:
        found.append("a row of a table without a handle key")
        return found
    upsert = event.op in (Op.INSERT, Op.UPSERT, Op.UPDATE)
    found += _image_problems(event.after, schema, key_needed=upsert, what="after")
    found += _image_problems(event.before, schema, key_needed=event.op in (Op.DELETE, Op.UPDATE), what="before")
    return found


# --- decoding under a time bound ----------------------------------------------------------------


class DecodeTookTooLong(BaseException):
    """A decode call ran past the time bound. A BaseException, so no `except Exception` in the code under test can hide it."""


@contextlib.contextmanager
def time_bound(seconds: float = DECODE_TIME_BOUND_SECONDS) -> Iterator[None]:
    """Interrupt the block with DecodeTookTooLong after `seconds` (a real timer, not a measurement after the fact).

    Python runs the signal handler between bytecodes: a loop inside compiled code (fastavro reading a
    claimed item count) is interrupted only when it returns, which is why the decoders refuse what could
    start such a loop. Needs the main thread (signals); pytest and the fault script run there.
    """

    def expire(signum, frame):
        raise DecodeTookTooLong(f"longer than {seconds:g}s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --- mutations -------------------------------------------------------------------------------------

# JSON values of every type, at and past the edges of the types TiDB columns have.
HOSTILE_JSON: tuple = (
    None, True, False, 0, -1, 1, 2**31, -(2**31) - 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64 - 1,
    2**64, 10**30, -(10**30), 1.5, -0.0, 1e308, -1e308, 5e-324, 3.5e38,
    "", "0", "-1", "1.5", "1e999", "-1e-999", "NaN", "Infinity", "-Infinity", "0x10", " 7 ", "1_000",
    "9" * 40, "0." + "0" * 40 + "1", "-" + "9" * 30 + ".999", "18446744073709551616", "-9223372036854775809",
    "0000-00-00", "0000-00-00 00:00:00", "2024-02-30", "9999-12-31 23:59:59.999999", "10000-01-01 00:00:00",
    "0001-01-01 00:00:00", "2024-01-01 25:61:61", "2024-01-01T00:00:00+99:00", "-838:59:59.000000", "838:59:59.9999999",
    "2024-06-01", "2024-06-01 12:00:00+05:00", "2024-06-01T12:00:00", "2024-06-01T12:00:00Z",
    "\x00", "🙂", "\\", "'", '"', "a,b", "\\x", "\\u12", "\\777", "=", "!!!notbase64",
    "America", "../../../../etc/passwd", "file:///etc/passwd", "x" * 300,
    [], {}, [None], [1, 2], {"": None}, {"location": "America", "value": "2020-01-01 00:00:00"},
    {"location": "x" * 300, "value": "2020-01-01 00:00:00"}, {"location": "UTC", "value": 5}, {"value": -1},
    {"location": "UTC", "value": "1000-01-01"}, {"location": "UTC", "value": "2024-06-01 12:00:00+05:00"},
    {"value": "2020-01-01 00:00:00"}, {"t": 999, "v": 1}, {"t": 3, "f": -1, "v": "1"},
)
# Values Avro can carry in the Simple Avro and TiCDC avro messages; the writer keeps those the slot's type allows.
HOSTILE_AVRO: tuple = (
    None, True, 0, -1, 1, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 1.5, -0.0, float("nan"), float("inf"),
    float("-inf"), 3.4e38, 1e308, "", "0", "-1", "1e999", "NaN", "9" * 40, "0000-00-00", "0000-00-00 00:00:00",
    "2024-02-30", "10000-01-01 00:00:00", "-838:59:59.000000", "\x00", "🙂", "America", "x" * 300,
    "2024-06-01", "2024-06-01 12:00:00+05:00",
    b"", b"\x00", b"\xff" * 9, b"\x7f" + b"\xff" * 40, bytes(300), Decimal("1e40"), Decimal("-99999999999999999999.999"),
    Decimal("0.001"), Decimal("0"), [], [""], {"location": "America", "value": "2020-01-01 00:00:00"},
    {"location": "UTC", "value": "0000-00-00 00:00:00"}, {"location": "x" * 300, "value": "1"}, {"value": -1},
    {"location": "UTC", "value": "1000-01-01"},
    {"value": 2**63 - 1},
)

_DEEP = "@@hostile-deep@@"
_BAD_UTF8 = "@@hostile-bad-utf8@@"
_SPLICES = {
    _DEEP: b"[" * DEEP_NESTING + b"]" * DEEP_NESTING,
    # inside a JSON string: a lone continuation byte, an overlong '/', an encoded surrogate, a cut sequence
    _BAD_UTF8: b'"a\x80b\xc0\xaf\xed\xa0\x80\xf0\x9f"',
}


def _slots(document: object) -> list[tuple[object, object]]:
    """Every (container, key or index) in a parsed document, the document itself first (in a holder)."""
    holder = [document]
    out: list[tuple[object, object]] = []
    stack: list[tuple[object, object]] = [(holder, 0)]
    while stack:
        container, key = stack.pop()
        out.append((container, key))
        child = container[key]
        if isinstance(child, dict):
            stack.extend((child, k) for k in child)
        elif isinstance(child, list):
            stack.extend((child, i) for i in range(len(child)))
    return out


def _hostile_number(chooser: Chooser) -> int:
    magnitude = 1 << chooser.below(70)
    return pick(chooser, (magnitude, -magnitude, magnitude - 1, -magnitude - 1))


def _copy(document: object) -> object:
    """A copy of a parsed document's dicts and lists (the leaves are immutable): copy.deepcopy costs ten times more."""
    if isinstance(document, dict):
        return {k: _copy(v) for k, v in document.items()}
    if isinstance(document, list):
        return [_copy(v) for v in document]
    return document


def mutate_document(document: object, chooser: Chooser, values: Sequence = HOSTILE_JSON, *, splices: bool = True) -> object:
    """A structurally spoiled copy of a parsed JSON (or Avro) document.

    With `splices`, markers may stand for what no Python value can be (deep nesting, invalid UTF-8);
    `dump_json` writes them. Without (Avro), those two operations pick another value instead.
    """
    holder = [_copy(document)]
    slots = _slots(holder[0])
    container, key = pick(chooser, slots)
    if container is slots[0][0]:
        container = holder  # the document itself
    operation = chooser.below(8)
    if operation == 0:
        container[key] = pick(chooser, values)
    elif operation == 1:
        if container is holder:
            holder[0] = None  # the whole document missing
        else:
            del container[key]  # a missing key (or list item)
    elif operation == 2:
        dicts = [c[k] for c, k in slots if isinstance(c[k], dict)] or [holder]
        target = pick(chooser, dicts)
        if isinstance(target, dict):
            target[pick(chooser, ("extra", "", "type", "op", "d", "u", "p", "t", "_tidb"))] = pick(chooser, values)
    elif operation in (3, 4):
        container[key] = (_DEEP if operation == 3 else _BAD_UTF8) if splices else pick(chooser, values)
    elif operation == 5:
        container[key] = pick(chooser, ("x", "9", "\\", "é")) * (OVERSIZED_BYTES // 2)
    elif operation == 6:
        other, other_key = pick(chooser, slots[1:] or slots)
        container[key] = _copy(other[other_key])  # a value of another field: a plausible wrong type
    else:
        container[key] = _hostile_number(chooser)
    return holder[0]


def dump_json(document: object) -> bytes:
    """`document` as JSON, with splice markers replaced by their hostile bytes."""
    try:
        text = orjson.dumps(document)  # several times faster; it refuses integers beyond 64 bits
    except TypeError:
        text = json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    if b"@@hostile-" in text:
        for marker, data in _SPLICES.items():
            text = text.replace(f'"{marker}"'.encode(), data)
    return text


def _compressed(codec: str, data: bytes) -> bytes:
    return compress(codec, data)


def _decompressed(codec: str, data: bytes) -> bytes:
    if codec == "lz4":
        return bytes(cramjam.lz4.decompress(data))
    if codec == "snappy":
        return bytes(cramjam.snappy.decompress_raw(data))
    return data


def _mutated_json_bytes(data: bytes, codec: str, chooser: Chooser) -> bytes:
    document = json.loads(_decompressed(codec, data))
    return _compressed(codec, dump_json(mutate_document(document, chooser)))


# Byte-level mutations of any message ---------------------------------------------------------------


def _part(message: RawMessage, chooser: Chooser) -> str:
    """Which part of the message to spoil: the value, or the key where the protocol uses one."""
    if message.key and (not message.value or chooser.below(3) == 0):
        return "key"
    return "value"


def _replace_part(message: RawMessage, part: str, data: bytes | None) -> RawMessage:
    return message._replace(**{part: data})


def random_bytes(case: Case, message: RawMessage, chooser: Chooser) -> RawMessage:
    """Noise instead of the value (and sometimes the key), keeping the message's position."""
    value = chooser.binary(pick(chooser, (0, 16, 256, 4096)))
    key = message.key
    if chooser.below(2) == 0:
        key = None if chooser.below(4) == 0 else chooser.binary(64)
    return message._replace(key=key, value=None if chooser.below(16) == 0 else value)


def truncated(case: Case, message: RawMessage, chooser: Chooser) -> RawMessage:
    part = _part(message, chooser)
    data = getattr(message, part) or b""
    return _replace_part(message, part, data[: chooser.below(len(data) + 1)])


def byte_changed(case: Case, message: RawMessage, chooser: Chooser) -> RawMessage:
    """One to four bytes replaced, inserted or removed."""
    part = _part(message, chooser)
    data = bytearray(getattr(message, part) or b"")
    for _ in range(1 + chooser.below(4)):
        at = chooser.below(len(data) + 1)
        operation = chooser.below(3)
        if operation == 0 and at < len(data):
            data[at] = chooser.below(256)
        elif operation == 1:
            data[at:at] = chooser.binary(4)
        else:
            del data[at : at + 1 + chooser.below(8)]
    return _replace_part(message, part, bytes(data))


# Structural mutations, by message shape -------------------------------------------------------------


def structural(case: Case, message: RawMessage, chooser: Chooser) -> RawMessage:
    """Spoil what is inside the message's encoding, keeping the encoding itself valid where possible."""
    if case.shape == "json":
        part = _part(message, chooser)
        data = getattr(message, part)
        if data is None:
            return byte_changed(case, message, chooser)
        codec = case.compression if part == "value" else "none"
        return _replace_part(message, part, _mutated_json_bytes(data, codec, chooser))
    if case.shape == "open":
        return _open_structural(case, message, chooser)
    if case.shape == "simple-avro":
        spoiled = _avro_structural(message.value, _SIMPLE_AVRO_SCHEMA, chooser)
        return byte_changed(case, message, chooser) if spoiled is None else message._replace(value=spoiled)
    return _confluent_structural(case, message, chooser)


_SIMPLE_AVRO_SCHEMA = fastavro.parse_schema(simple_avro.MESSAGE_SCHEMA)


def _avro_structural(data: bytes, schema: object, chooser: Chooser, header: bytes = b"") -> bytes | None:
    """The Avro body re-encoded with a hostile value somewhere, or None when no value tried fits the schema."""
    record = fastavro.schemaless_reader(io.BytesIO(data[len(header) :]), schema, None)
    for _ in range(4):
        spoiled = mutate_document(record, chooser, HOSTILE_AVRO, splices=False)  # text-level splices have no Avro form
        out = io.BytesIO()
        out.write(header)
        try:
            fastavro.schemaless_writer(out, schema, _tagged(schema, spoiled))
        except Exception:  # noqa: BLE001 - the writer refuses values its schema does not allow: try another
            continue
        return out.getvalue()
    return None


def _tagged(schema: object, record: object) -> object:
    # The Simple Avro message is a top-level union whose branch fastavro cannot guess from a dict.
    if schema is _SIMPLE_AVRO_SCHEMA and isinstance(record, dict) and isinstance(record.get("payload"), dict):
        names = {"WATERMARK": "Watermark", "BOOTSTRAP": "Bootstrap", "DDL": "DDL", "DML": "DML"}
        kind = names.get(record.get("type"), "DML")
        payload = (simple_avro.qualified(kind), record["payload"])
        return (simple_avro.qualified("Message"), {**record, "payload": payload})
    return record


def _confluent_structural(case: Case, message: RawMessage, chooser: Chooser) -> RawMessage:
    part = _part(message, chooser)
    data = getattr(message, part)
    if data is None or len(data) < 5 or case.registry is None:
        return byte_changed(case, message, chooser)
    if chooser.below(4) == 0:
        # Another schema id: one the registry lacks, or another table's (key for value, value for key).
        schema_id = pick(chooser, (0, 2**32 - 1, max(case.registry.schemas) + 1 + chooser.below(5), *case.registry.schemas))
        return _replace_part(message, part, data[:1] + struct.pack(">I", schema_id) + data[5:])
    schema_id = struct.unpack(">I", data[1:5])[0]
    schema = fastavro.parse_schema(json.loads(case.registry.schemas[schema_id]))
    spoiled = _avro_structural(data, schema, chooser, header=data[:5])
    return byte_changed(case, message, chooser) if spoiled is None else _replace_part(message, part, spoiled)


def _item(data: bytes) -> bytes:
    return struct.pack(">Q", len(data)) + data


def _items(data: bytes) -> list[bytes]:
    out, at = [], 0
    while at < len(data):
        (length,) = struct.unpack_from(">Q", data, at)
        out.append(data[at + 8 : at + 8 + length])
        at += 8 + length
    return out


def _open_structural(case: Case, message: RawMessage, chooser: Chooser) -> RawMessage:
    keys, values = _items(message.key[8:]), _items(message.value or b"")
    version = message.key[:8]
    at = chooser.below(len(keys))
    operation = chooser.below(4)
    if operation == 0:
        keys[at] = dump_json(mutate_document(json.loads(keys[at]), chooser))
    elif operation == 1 and values[at]:
        values[at] = _mutated_json_bytes(values[at], case.compression, chooser)
    elif operation == 2:
        # Framing: a length that lies, a version that is not 1, or keys and values that do not pair up.
        lie = pick(chooser, (0, 1, 2**63, 2**64 - 1, len(values[at]) + 1))
        framed_key = version + b"".join(_item(k) for k in keys)
        framed_value = b"".join(_item(v) for v in values[:at]) + struct.pack(">Q", lie) + values[at]
        key = pick(chooser, (framed_key, struct.pack(">Q", 2) + framed_key[8:], framed_key + _item(b"{}")))
        return message._replace(key=key, value=framed_value)
    else:
        values[at] = _compressed(case.compression, dump_json(pick(chooser, HOSTILE_JSON)))
    framed_key = version + b"".join(_item(k) for k in keys)
    return message._replace(key=framed_key, value=b"".join(_item(v) for v in values))


# Large-message and registry mutations -------------------------------------------------------------


def hostile_claim_check_file(case: Case, message: RawMessage, chooser: Chooser) -> RawMessage:
    """A claim-check message naming a new file in the store whose content is not a valid claim-check message."""
    location, rewrite = _claim_location(case, message)
    if location is None or case.claim_root is None:
        return structural(case, message, chooser)
    original = (case.claim_root / location.rsplit("/", 1)[-1]).read_bytes()
    stored = json.loads(original)
    kind = chooser.below(5)
    if kind == 0:
        content = chooser.binary(256)
    elif kind == 1:
        content = original[: chooser.below(len(original) + 1)]
    elif kind == 2:
        content = dump_json(mutate_document(stored, chooser))
    else:
        # A well-formed file whose message is spoiled (kind 3: structurally, kind 4: its bytes).
        inner_case = dataclasses.replace(case, claim_root=None)
        inner = RawMessage("cdc", 0, 0, _b64(stored.get("key")), base64.b64decode(stored["value"]))
        spoiled = structural(inner_case, inner, chooser) if kind == 3 else byte_changed(inner_case, inner, chooser)
        content = json.dumps({"key": _b64text(spoiled.key), "value": _b64text(spoiled.value)}).encode()
    name = f"{uuid.uuid4()}.json"
    (case.claim_root / name).write_bytes(content)
    return rewrite(f"file:///anywhere/else/{name}")


def _b64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def _b64text(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _claim_location(case: Case, message: RawMessage) -> tuple[str | None, Callable[[str], RawMessage]]:
    """The claim-check location a message names, and how to make the same message name another."""
    if case.shape == "open":
        keys = _items(message.key[8:])
        key = json.loads(keys[0])
        if not key.get("ccl"):
            return None, lambda _: message

        def reopen(location: str) -> RawMessage:
            keys[0] = json.dumps({**key, "ccl": location}).encode()
            return message._replace(key=message.key[:8] + b"".join(_item(k) for k in keys))

        return key["ccl"], reopen
    if message.value is None:
        return None, lambda _: message
    body = json.loads(_decompressed(case.compression, message.value))
    holder = body.get("_tidb") if isinstance(body.get("_tidb"), dict) else body
    location = holder.get("claimCheckLocation")

    def rewrite(new: str) -> RawMessage:
        holder["claimCheckLocation"] = new
        return message._replace(value=_compressed(case.compression, json.dumps(body).encode()))

    return location, rewrite


def garbage_schema_text(real: str, chooser: Chooser) -> str:
    """A registry answer that is not a usable Avro schema: not JSON, JSON that is no schema, or a spoiled real one."""
    kind = chooser.below(5)
    if kind == 0:
        return chooser.binary(64).decode("latin-1")
    if kind == 1:
        return real[: chooser.below(len(real))]
    if kind == 2:
        return pick(chooser, GARBAGE_SCHEMAS)
    if kind == 3:
        return "[" * DEEP_NESTING + "]" * DEEP_NESTING
    return dump_json(mutate_document(json.loads(real), chooser)).decode("utf-8", "replace")


# JSON that is not a TiCDC value schema, or not a schema at all.
GARBAGE_SCHEMAS = (
    "", "null", "[]", "42", '"nope"', "{}", '{"type": "record"}', '{"type": "record", "name": "t", "fields": 7}',
    '{"type": "record", "name": "t", "fields": [{"name": "x", "type": "nope"}]}',
    '{"type": "record", "name": "t", "fields": [{"name": "x", "type": {"type": "bytes", "logicalType": "decimal", '
    '"precision": 2, "scale": 5, "connect.parameters": {"tidb_type": "DECIMAL"}}}]}',
    '{"type": "record", "name": "t", "fields": [{"name": "x", "type": {"type": "fixed", "name": "f", "size": -1, '
    '"connect.parameters": {"tidb_type": "BLOB"}}}]}',
    '{"type": "enum", "name": "e", "symbols": ["a", "a"]}', '{"type": "map"}', '{"type": "array", "items": {"type": "array"}}',
)


def registry_garbage(case: Case, message: RawMessage, chooser: Chooser) -> RawMessage:
    """The message framed with a new schema id under which the registry serves a schema that does not parse."""
    part = _part(message, chooser)
    data = getattr(message, part)
    registry = case.registry
    if registry is None or data is None or len(data) < 5:
        return byte_changed(case, message, chooser)
    real = registry.schemas[struct.unpack(">I", data[1:5])[0]]
    return _replace_part(message, part, data[:1] + struct.pack(">I", serve_schema(registry, garbage_schema_text(real, chooser))) + data[5:])


def serve_schema(registry: FakeSchemaRegistry, text: str) -> int:
    """Put `text` in the registry emulator under a new id, as if registered (the emulator itself would refuse garbage)."""
    with registry._lock:
        schema_id = max(registry.schemas, default=0) + 1
        registry.schemas[schema_id] = text
    return schema_id


# name -> (mutation, for which cases); every case gets the byte-level and structural ones.
Mutation = Callable[[Case, RawMessage, Chooser], RawMessage]
MUTATIONS: dict[str, Mutation] = {
    "random-bytes": random_bytes,
    "truncated": truncated,
    "byte-changed": byte_changed,
    "structural": structural,
    "claim-check-file": hostile_claim_check_file,
    "registry-garbage": registry_garbage,
}


def mutations_for(case: Case) -> list[str]:
    names = ["random-bytes", "truncated", "byte-changed", "structural"]
    if case.claim_root is not None:
        names.append("claim-check-file")
    if case.registry is not None:
        names.append("registry-garbage")
    return names
