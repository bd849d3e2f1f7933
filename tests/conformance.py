"""Conformance fixtures: the protocol documents' own example messages, with the meaning the documents give them.

Every protocol test elsewhere reads messages written by the project's own stand-in encoders
(`testbed/encoders`): if those misread TiCDC, the decoders agree with the mistake. These
fixtures are written by hand from the text of the documents in `../shared/spec/` instead,
one JSON file per documented example under `tests/fixtures/conformance/<protocol>/`. The passages
they cite are kept beside them (`tests/fixtures/conformance/cited.json`, made by
`python -m tests.conformance` from the documents), so a clone with nothing beside it checks
its citations too:

    {
      "example":  what the document shows, in a few words (docs/protocols.md's conformance table lists it),
      "document": the file in ../shared/spec/ it is taken from,
      "where":    the section of the document,
      "protocol": the `[protocol] name`, "options": other `[protocol]` keys,
      "files":    {name: JSON} written to a fresh directory "{files}" options may name (claim-check);
                  {"$base64_json": value} in a file stands for the base64 of that value as compact JSON,
      "steps":    [ {"why": ..., "key"/"value": the message as the document prints it, "expect": [events]} ],
      "xfail":    where the product does not (yet) give the document's meaning: why (optional)
    }

A message part is a JSON value (sent as compact JSON), {"$text": str}, {"$base64": str},
{"$avro": {"schema": Avro schema, "datum": value, "subject": registry subject}}
(Confluent framing; the schema registered under the subject first; the datum may use the value tags
below, e.g. $bytes for Avro bytes, $decimal for the decimal logical type) or null. A step's "topic"
(default "conformance") is the Kafka topic. Expected events:

    {"event": "row", "op": "INSERT|UPDATE|DELETE|UPSERT", "table": "db.t", "commit_ts": n,
     "after": {column: value}, "before": {key column: value}, "columns": ["name TYPE [NOT NULL]"], "key": [..]}
    {"event": "schema", "kind": "CREATE|ALTER|RENAME|TRUNCATE|DROP|INDEX|OTHER", "table": "db.t",
     "commit_ts": n, "columns": [...], "key": [...], "previous_name": "db.t"}
    {"event": "watermark", "commit_ts": n}
    {"event": "error", "says": text the typed DecodeError's message contains}

Only the keys an expectation names are compared. Values are JSON, with tags for what JSON
cannot say: {"$decimal": "90.5"}, {"$timestamp": ISO with offset}, {"$datetime": ISO without},
{"$date": "2024-02-29"}, {"$bytes": base64}. Numbers compare with their type: 25 is not 25.0.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from ticdc_delta.schema_cache.events import Event, RawMessage, RowChange, SchemaChange, TableSchema, Watermark

FIXTURES = Path(__file__).parent / "fixtures" / "conformance"
SPEC = Path(__file__).resolve().parents[2] / "shared" / "spec"
# The cited passages: {document: {section heading: the document's text from that heading on, PASSAGE long}}.
CITED = FIXTURES / "cited.json"
PASSAGE = 600


@dataclass(frozen=True)
class Fixture:
    path: Path
    example: str
    document: str
    where: str
    protocol: str
    options: dict[str, Any]
    steps: list[dict[str, Any]]
    files: dict[str, Any] = field(default_factory=dict)
    xfail: str = ""

    @property
    def name(self) -> str:
        return f"{self.path.parent.name}/{self.path.stem}"


def load_fixtures() -> list[Fixture]:
    found = []
    for path in sorted(FIXTURES.glob("*/*.json")):
        raw = json.loads(path.read_text())
        found.append(
            Fixture(
                path=path,
                example=raw["example"],
                document=raw["document"],
                where=raw["where"],
                protocol=raw["protocol"],
                options=raw.get("options", {}),
                steps=raw["steps"],
                files=raw.get("files", {}),
                xfail=raw.get("xfail", ""),
            )
        )
    return found


# Registers an Avro schema under a subject and returns its registry id.
Register = Callable[[str, dict], int]


def registering(registry_url: str) -> Register:
    """Registers schemas in the registry at `registry_url` with confluent-kafka's client."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    client = SchemaRegistryClient({"url": registry_url})
    return lambda subject, schema: client.register_schema(subject, Schema(json.dumps(schema), "AVRO"))


def message_part(part: Any, register: Register | None) -> bytes | None:
    """The bytes of a message's key or value as the fixture writes it."""
    if part is None:
        return None
    if isinstance(part, dict) and len(part) == 1:
        (tag, body), = part.items()
        if tag == "$text":
            return body.encode()
        if tag == "$base64":
            return base64.b64decode(body)
        if tag == "$avro":
            return _confluent_avro(body, register)
    return json.dumps(part, separators=(",", ":"), ensure_ascii=False).encode()


def _confluent_avro(body: dict, register: Register | None) -> bytes:
    import io

    import fastavro

    if register is None:
        raise AssertionError("an Avro message needs a registry")
    schema_id = register(body["subject"], body["schema"])
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(body["schema"]), typed_value(body["datum"]))
    return b"\x00" + struct.pack(">I", schema_id) + out.getvalue()


def file_content(value: Any) -> Any:
    """A fixture file's JSON with {"$base64_json": value} replaced by that value's compact JSON, base64-encoded."""
    if isinstance(value, dict) and set(value) == {"$base64_json"}:
        return base64.b64encode(message_part(value["$base64_json"], None)).decode()
    if isinstance(value, dict):
        return {k: file_content(v) for k, v in value.items()}
    return value


def raw_message(step: dict, offset: int, register: Register | None = None) -> RawMessage:
    return RawMessage(
        topic=step.get("topic", "conformance"),
        partition=step.get("partition", 0),
        offset=offset,
        key=message_part(step.get("key"), register),
        value=message_part(step.get("value"), register),
    )


def typed_value(value: Any) -> Any:
    """A fixture value as the Python value the decoders produce."""
    if isinstance(value, dict) and len(value) == 1:
        (tag, body), = value.items()
        if tag == "$decimal":
            return Decimal(body)
        if tag == "$timestamp":
            parsed = dt.datetime.fromisoformat(body)
            assert parsed.tzinfo is not None, f"$timestamp needs an offset: {body}"
            return parsed
        if tag == "$datetime":
            return dt.datetime.fromisoformat(body)
        if tag == "$date":
            return dt.date.fromisoformat(body)
        if tag == "$bytes":
            return base64.b64decode(body)
    if isinstance(value, dict):
        return {k: typed_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed_value(v) for v in value]
    return value


def _typed(value: Any) -> tuple[str, Any]:
    """A value with its type, so that equal numbers of different types differ."""
    if isinstance(value, dt.datetime):
        return ("timestamp" if value.tzinfo else "datetime", value)
    return (type(value).__name__, value)


def _columns(schema: TableSchema | None) -> list[str] | None:
    if schema is None:
        return None
    return [f"{c.name} {c.spark_type}{'' if c.nullable else ' NOT NULL'}" for c in schema.columns]


def _row(schema: TableSchema, values: tuple | None, only_key: bool = False) -> dict | None:
    if values is None:
        return None
    names = schema.column_names()
    wanted = schema.key if only_key else names
    return {name: _typed(values[names.index(name)]) for name in wanted}


def describe(event: Event) -> dict[str, Any]:
    """An event in the fixtures' terms (every key an expectation may name)."""
    if isinstance(event, RowChange):
        return {
            "event": "row",
            "op": event.op.value,
            "table": str(event.table),
            "commit_ts": event.commit_ts,
            "after": _row(event.schema, event.after),
            "before": _row(event.schema, event.before, only_key=True),
            "columns": _columns(event.schema),
            "key": list(event.schema.key),
        }
    if isinstance(event, SchemaChange):
        return {
            "event": "schema",
            "kind": event.kind.value,
            "table": str(event.table),
            "commit_ts": event.commit_ts,
            "columns": _columns(event.schema),
            "key": list(event.schema.key) if event.schema else None,
            "previous_name": str(event.previous_name) if event.previous_name else None,
        }
    if isinstance(event, Watermark):
        return {"event": "watermark", "commit_ts": event.commit_ts}
    raise AssertionError(f"unknown event {event!r}")


def expected(spec: dict[str, Any]) -> dict[str, Any]:
    """An expectation in `describe`'s terms."""
    out = dict(spec)
    for image in ("after", "before"):
        if out.get(image) is not None:
            out[image] = {k: _typed(typed_value(v)) for k, v in out[image].items()}
    return out


def mismatches(events: list[Event], specs: list[dict[str, Any]]) -> list[str]:
    """What differs between decoded events and a step's expectations (empty when they agree)."""
    if len(events) != len(specs):
        return [f"{len(events)} events, expected {len(specs)}: {[describe(e) for e in events]}"]
    found = []
    for i, (event, spec) in enumerate(zip(events, specs, strict=True)):
        actual, want = describe(event), expected(spec)
        for key, value in want.items():
            if actual.get(key) != value:
                found.append(f"event {i} {key}: got {actual.get(key)!r}, the document means {value!r}")
    return found


# --- the cited passages ---------------------------------------------------------------------------


def cited_sections(fixture: Fixture) -> tuple[str, str]:
    """(document, heading) a fixture cites: the last part of its `where` is the heading looked up."""
    return fixture.document, fixture.where.split(" > ")[-1]


def cite(spec: Path = SPEC, fixtures: list[Fixture] | None = None) -> dict[str, dict[str, str]]:
    """Each cited heading's passage, from the documents in `spec` (KeyError: a document or heading is missing)."""
    passages: dict[str, dict[str, str]] = {}
    for fixture in fixtures if fixtures is not None else load_fixtures():
        document, heading = cited_sections(fixture)
        text = (spec / document).read_text()
        at = text.find(heading)
        if at < 0:
            raise KeyError(f"{fixture.name}: section {heading!r} not in {document}")
        passages.setdefault(document, {})[heading] = text[at:at + PASSAGE]
    return {document: dict(sorted(sections.items())) for document, sections in sorted(passages.items())}


if __name__ == "__main__":
    # Refresh the repository's copy of the cited passages from ../shared/spec.
    CITED.write_text(json.dumps(cite(), ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {CITED}")
