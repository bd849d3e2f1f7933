"""Hostile input, property-based: every decoder returns appliable events or raises DecodeError.

For every decoder configuration (Simple JSON and Avro, TiCDC avro with a registry, debezium with
and without inline schemas, canal-json, open-protocol, and the large-message paths: lz4/snappy
values and claim-check references; `tests/hostile.py` builds their valid streams with the stand-in
encoders), hypothesis feeds random bytes, truncated and byte-changed valid messages, structurally
spoiled ones (wrong JSON types, huge and negative numbers, 100k nested arrays, invalid UTF-8, 1 MiB
fields, missing and extra keys, lying frame lengths), registry schemas that do not parse and
claim-check files that are not claim-check messages. The property, for each decode call:

- it returns events or raises the product's DecodeError: never another exception type;
- it ends within `hostile.DECODE_TIME_BOUND_SECONDS` (2 s, generous: the slowest hostile message
  decodes in milliseconds). A real timer interrupts it, so a hang in Python code fails the test
  instead of hanging it (compiled loops only when they return); hypothesis' own deadline is off
  because it only measures after the call returns;
- every event it returns can be applied: each row value fits its column's Spark type as
  `schema_cache.types` maps it (integer ranges, DECIMAL precision and scale, finite FLOAT within
  float32, str, bytes, dates, naive or aware datetimes), handle keys are set, commitTs fits Delta's
  64-bit record, column types are valid Spark types (`hostile.problems`);
- and the schema cache it leaves behind can still be saved and restored (the checkpoint does so).

The streams continue after the hostile message with the rest of the valid stream, so a hostile
BOOTSTRAP or DDL that poisons a decoder's cache is caught by what it does to the rows after it.

Deterministic in CI: the `hostile-input` profile keeps no example database (nothing is written into
the checkout), and each test's examples come from a seed of the Python version (`PAIR_SEED`): the two CI
pairs try different inputs, each pair the same on every run. Pure Python: no Spark, no Kafka; the registry is
the HTTP emulator (tests/registry_server.py) read by confluent-kafka's real client.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, seed, settings
from hypothesis import strategies as st

from tests import hostile
from tests.registry_server import FakeSchemaRegistry
from ticdc_delta.exceptions import DecodeError
from ticdc_delta.schema_cache.events import RawMessage

# Hypothesis also caches the constants it finds in our sources in its storage directory (./.hypothesis by
# default, whatever the database setting): keep that out of the checkout. Read lazily, so set before any example.
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(Path(tempfile.gettempdir()) / "ticdc-delta-hypothesis"))

settings.register_profile(
    "hostile-input",
    derandomize=True,  # the same examples on every run: CI cannot turn red by luck (`PAIR_SEED` picks them)
    database=None,  # no .hypothesis/ example database in the checkout
    deadline=None,  # hostile.time_bound bounds each decode call instead (see the module docstring)
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
PROFILE = settings.get_profile("hostile-input")

# Examples per case: each CI pair runs half of what one pair ran until 2026-11-27, from a seed of its own
# Python version (`PAIR_SEED`): together they try about as many distinct inputs as one pair did (both start
# from hypothesis' simplest examples), each in about a third of the CPU on the 2-core machine both pairs share (the fault script's fuzz section pushes a million
# messages through the same mutations). Still deterministic: a pair's examples are the same on every run.
RANDOM_EXAMPLES = 25
MUTATED_EXAMPLES = 55
TARGETED_EXAMPLES = 55
PAIR_SEED = f"hostile input on Python {sys.version_info.major}.{sys.version_info.minor}"

CASE_NAMES = (
    "simple-json", "simple-avro", "avro", "debezium", "debezium-no-schema", "canal-json", "open-protocol",
    "simple-json-lz4", "canal-json-snappy", "open-protocol-lz4",
    "simple-json-claim-check", "canal-json-claim-check", "open-protocol-claim-check",
)


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    registry = FakeSchemaRegistry()
    registry.start()
    try:
        built = hostile.build_cases(tmp_path_factory.mktemp("hostile"), registry)
        assert sorted(built) == sorted(CASE_NAMES)
        yield built
    finally:
        registry.stop()


class DataChooser:
    """hostile.Chooser over hypothesis' data, so examples shrink choice by choice."""

    def __init__(self, data) -> None:
        self._data = data

    def below(self, n: int) -> int:
        return self._data.draw(st.integers(0, n - 1))

    def binary(self, max_size: int) -> bytes:
        return self._data.draw(st.binary(max_size=max_size))


def decode_hostile(decoder, message: RawMessage) -> list:
    """Decode `message`, asserting the property; DecodeError counts as a correct refusal (no events)."""
    try:
        with hostile.time_bound():
            events = decoder.decode(message)
    except DecodeError:
        events = []
    except hostile.DecodeTookTooLong as err:
        raise AssertionError(f"decoding did not end: {err}") from None
    for event in events:
        found = hostile.problems(event)
        assert not found, f"{event!r} cannot be applied: {found}"
    assert all(isinstance(err, DecodeError) for err in decoder.take_errors())
    return events


def primed(case: hostile.Case):
    """A fresh decoder that has read the case's whole valid stream (every structure known)."""
    decoder = case.new_decoder()
    for message in case.messages:
        decoder.decode(message)
    return decoder


def assert_state_restores(case: hostile.Case, decoder) -> None:
    case.new_decoder().restore(decoder.state())


# --- random bytes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CASE_NAMES)
@settings(PROFILE, max_examples=RANDOM_EXAMPLES)
@seed(PAIR_SEED)
@given(key=st.none() | st.binary(max_size=64), value=st.none() | st.binary(max_size=1024))
def test_random_bytes_are_refused_or_decoded(cases, name, key, value):
    case = cases[name]
    decoder = primed(case)
    decode_hostile(decoder, RawMessage(case.messages[-1].topic, 0, 10_000, key, value))
    assert_state_restores(case, decoder)


# --- valid messages, spoiled ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", CASE_NAMES)
@settings(PROFILE, max_examples=MUTATED_EXAMPLES)
@seed(PAIR_SEED)
@given(data=st.data())
def test_spoiled_valid_messages_are_refused_or_decoded_and_what_follows_too(cases, name, data):
    # A valid stream, one message of it spoiled (truncated, bytes changed, its JSON/Avro/framing
    # spoiled, its claim-check file or registry schema replaced by garbage), then the rest of it.
    case = cases[name]
    chooser = DataChooser(data)
    at = chooser.below(len(case.messages))
    mutation = hostile.pick(chooser, hostile.mutations_for(case))
    decoder = case.new_decoder()
    for message in case.messages[:at]:
        decoder.decode(message)
    spoiled = hostile.MUTATIONS[mutation](case, case.messages[at], chooser)
    for message in (spoiled, *case.messages[at + 1 :]):
        decode_hostile(decoder, message)
    assert_state_restores(case, decoder)


# --- registry answers that do not parse ----------------------------------------------------------


_DECIMAL_SCALE_OVER_PRECISION = (
    '{"type": "record", "name": "all_types", "namespace": "default.shop", "fields": [{"name": "id", "type": '
    '{"type": "bytes", "logicalType": "decimal", "precision": 2, "scale": 5, "connect.parameters": {"tidb_type": "DECIMAL"}}}]}'
)


# A column TiCDC never writes: an array of records with no fields (zero bytes each).
_ARRAY_OF_NOTHING = (
    '{"type": "record", "name": "all_types", "namespace": "default.shop", "fields": [{"name": "id", "type": '
    '{"type": "array", "items": {"type": "record", "name": "e", "fields": []}, "connect.parameters": {"tidb_type": "INT"}}}]}'
)
# 2^22 items (an Avro long, zigzag varint), then the end of the array. A message can claim 2^62; then
# fastavro's compiled loop never returns and no timer can stop it (it ran out of 20 GB here). 2^22
# takes seconds, and the time bound fires when the loop returns.
_MANY_ITEMS = bytes([0x80, 0x80, 0x80, 0x04]) + b"\x00"


@settings(PROFILE, max_examples=TARGETED_EXAMPLES)
@seed(PAIR_SEED)
@given(
    garbage=st.sampled_from(hostile.GARBAGE_SCHEMAS)
    | st.binary(max_size=200).map(lambda data: data.decode("latin-1"))
    | st.randoms(use_true_random=False),
    part=st.sampled_from(["key", "value"]),
    body=st.none() | st.binary(max_size=64),
)
# Regression: fastavro's SchemaParseException (not a ValueError) escaped the decoder as a crash.
@example(garbage=_DECIMAL_SCALE_OVER_PRECISION, part="key", body=None)
@example(garbage=_DECIMAL_SCALE_OVER_PRECISION, part="value", body=None)
# Regression: with a schema holding an array, a few bytes made fastavro build millions of empty records.
@example(garbage=_ARRAY_OF_NOTHING, part="key", body=_MANY_ITEMS)
@example(garbage=_ARRAY_OF_NOTHING, part="value", body=_MANY_ITEMS)
def test_registry_schemas_that_do_not_parse_are_bad_input(cases, garbage, part, body):
    # The registry emulator serves `garbage` under a new id and a valid message (or `body`) is framed
    # with it: the product fetches it with confluent-kafka's client over HTTP, as from a real registry.
    case = cases["avro"]
    message = next(m for m in case.messages if m.key and m.value)
    framed = getattr(message, part)
    if not isinstance(garbage, str):  # a random spoiling of the real schema
        real = case.registry.schemas[int.from_bytes(framed[1:5], "big")]
        garbage = hostile.garbage_schema_text(real, hostile.RandomChooser(garbage))
    schema_id = hostile.serve_schema(case.registry, garbage)
    payload = framed[5:] if body is None else body
    hostile_message = message._replace(**{part: framed[:1] + schema_id.to_bytes(4, "big") + payload})
    decoder = primed(case)
    decode_hostile(decoder, hostile_message)
    assert_state_restores(case, decoder)


# --- hostile values in the rows of the JSON protocols -------------------------------------------------

# Where a column's value, and the commitTs, sit in each JSON protocol's row message.
_VALUE_CASES = ("simple-json", "debezium", "canal-json", "open-protocol")
_COLUMNS = ("id", "i8", "u16", "u32", "price", "f", "d", "name", "raw", "day", "at", "at6", "ts", "t", "y", "flag",
            "bits", "size", "tags", "doc", "@commitTs")


def _with_value(case: hostile.Case, column: str, value: object) -> RawMessage:
    """The case's first INSERT with `column` (or the commitTs) holding `value`, as that protocol places it."""
    if case.shape == "open":
        message = next(m for m in case.messages if b'"t": 1' in m.key)
        keys, values = hostile._items(message.key[8:]), hostile._items(message.value)
        key, body = json.loads(keys[0]), json.loads(values[0])
        if column == "@commitTs":
            key["ts"] = value
        else:
            body["u"][column]["v"] = value
        framed_key = message.key[:8] + hostile._item(json.dumps(key).encode())
        return message._replace(key=framed_key, value=hostile._item(hostile.dump_json(body)))
    message = next(m for m in case.messages if b"INSERT" in m.value or b'"op":"c"' in m.value)
    body = json.loads(message.value)
    if case.name == "simple-json":
        row, ts_holder, ts_key = body["data"], body, "commitTs"
    elif case.name == "debezium":
        row, ts_holder, ts_key = body["payload"]["after"], body["payload"]["source"], "commit_ts"
    else:
        row, ts_holder, ts_key = body["data"][0], body["_tidb"], "commitTs"
    if column == "@commitTs":
        ts_holder[ts_key] = value
    else:
        row[column] = value
    return message._replace(value=hostile.dump_json(body))


@pytest.mark.parametrize("name", _VALUE_CASES)
@settings(PROFILE, max_examples=TARGETED_EXAMPLES)
@seed(PAIR_SEED)
@given(
    column=st.sampled_from(_COLUMNS),
    value=st.sampled_from(hostile.HOSTILE_JSON)
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.integers().map(str)
    | st.decimals(allow_nan=False, allow_infinity=False).map(str)
    | st.binary(max_size=40).map(lambda data: data.decode("latin-1")),
)
# Regressions, all accepted before and broken only when the batch was applied (or silently wrong):
@example(column="i8", value="128")  # TINYINT out of range: PySpark refuses the batch, the job stops
@example(column="i8", value=2**40)
@example(column="y", value="-1125899906842624")  # YEAR -> SMALLINT out of range
@example(column="price", value="1e40")  # DECIMAL(12,3) overflow: Spark stores NULL
@example(column="price", value="0.0001")  # more decimal places than the scale: Spark rounds
@example(column="f", value="1e39")  # beyond float32: Spark stores infinity
@example(column="f", value=1e39)
@example(column="d", value="NaN")  # TiDB has no NaN
@example(column="ts", value={"location": "America", "value": "2024-01-01 00:00:00"})  # IsADirectoryError escaped
@example(column="ts", value={"location": "x" * 300, "value": "2024-01-01 00:00:00"})  # OSError: name too long
# A TIMESTAMP given only a date: CPython's fromisoformat drops the "+00:00" the fast path appends, so the
# value was a naive datetime, which Spark takes in the session's zone (a different instant).
@example(column="ts", value="1000-01-01")
@example(column="ts", value="2024-06-01T12:00:00")  # debezium: a TIMESTAMP without its zone, naive
@example(column="at", value="2024-06-01 12:00:00+05:00")  # a DATETIME with an offset came out aware
@example(column="size", value="-1")  # ENUM index -1 read the last member
@example(column="size", value=-1)
@example(column="id", value=None)  # a NULL handle key: MERGE could never find the row again
@example(column="@commitTs", value=-1)  # commitTs Delta cannot record: the commit would fail
@example(column="@commitTs", value=2**63)
@example(column="@commitTs", value=1.5)
def test_hostile_values_in_rows_are_refused_or_fit_their_column(cases, name, column, value):
    case = cases[name]
    decode_hostile(primed(case), _with_value(case, column, value))


# --- table structures ------------------------------------------------------------------------------------


@settings(PROFILE, max_examples=TARGETED_EXAMPLES // 3)
@seed(PAIR_SEED)
@given(
    key=st.lists(st.sampled_from(["id", "i8", "name", "ID", "nope"]), max_size=4),
    extra=st.sampled_from([None, "id", "ID", "Name", "other"]),
)
# Regression: a key naming a column twice made the generated row function invalid Python (SyntaxError).
@example(key=["id", "id"], extra=None)
@example(key=["id"], extra="ID")  # two columns Spark takes for one: CREATE TABLE would fail
def test_structures_naming_a_column_twice_are_refused(cases, key, extra):
    # The Simple JSON CREATE of the table, with its primary key and columns changed, then the stream's rows.
    case = cases["simple-json"]
    at = next(i for i, m in enumerate(case.messages) if b'"type":"CREATE"' in m.value)
    body = json.loads(case.messages[at].value)
    body["tableSchema"]["indexes"][0]["columns"] = key
    if extra is not None:
        body["tableSchema"]["columns"].append({**body["tableSchema"]["columns"][7], "name": extra})
    decoder = case.new_decoder()
    for message in (case.messages[at]._replace(value=json.dumps(body).encode()), *case.messages[at + 1 :]):
        decode_hostile(decoder, message)
    assert_state_restores(case, decoder)


# --- DDL statements --------------------------------------------------------------------------------------


def _rename_ddl(case: hostile.Case, statement: str) -> RawMessage:
    """A RENAME TABLE DDL carrying `statement` (canal-json and open-protocol read renames from the text)."""
    if case.shape == "open":
        message = next(m for m in case.messages if b'"t": 2' in m.key)
        value = json.dumps({"q": statement, "t": 14}).encode()  # 14: TiDB's ActionRenameTable
        return message._replace(value=hostile._item(value))
    message = next(m for m in case.messages if b'"isDdl": true' in m.value)
    body = {**json.loads(message.value), "type": "RENAME", "sql": statement}
    return message._replace(value=json.dumps(body).encode())


_LONG_NAME = "a" * 100_000


@pytest.mark.parametrize("name", ["canal-json", "open-protocol"])
@settings(PROFILE, max_examples=TARGETED_EXAMPLES // 3)
@seed(PAIR_SEED)
@given(
    statement=st.sampled_from(["RENAME TABLE ", "ALTER TABLE t RENAME TO ", "RENAME TABLE a TO "]).flatmap(
        lambda head: st.binary(max_size=2000).map(lambda tail: head + tail.decode("latin-1"))
    )
)
# Regression: the rename regex tried every start with every length in a long name (quadratic):
# a 16 KB statement took 10 s, this 100 KB one minutes.
@example(statement="RENAME TABLE " + _LONG_NAME)
@example(statement="ALTER TABLE " + _LONG_NAME + " RENAME TO t")
@example(statement="RENAME TABLE " + "` a``" * 20_000)
def test_rename_statements_of_any_content_decode_in_time(cases, name, statement):
    case = cases[name]
    decode_hostile(primed(case), _rename_ddl(case, statement))


def test_random_chooser_draws_the_same_mutations_from_the_same_seed(cases):
    # The fault script's fuzz section relies on it: a seed reproduces a run.
    case = cases["simple-json"]

    def spoil(seed: int) -> list[RawMessage]:
        chooser = hostile.RandomChooser(random.Random(seed))
        return [hostile.MUTATIONS[m](case, case.messages[5], chooser) for m in hostile.mutations_for(case)]

    assert spoil(7) == spoil(7)
