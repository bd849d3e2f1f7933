"""Apicurio Registry, a real Schema Registry server, where it answers differently from Confluent's.

The product only reads schemas by id (confluent-kafka's client, `GET /schemas/ids/{id}`) and lists
subjects once to check its credentials; producers register. What differs must not matter to it:
- compatibility defaults to NONE (Confluent: BACKWARD), and a refused registration is a 409 whose
  error_code is 0 (Confluent: 409): a producer's concern, never the consumer's;
- ids are content ids: the same schema registered under two subjects (two topics) has one id, so the
  decoder's cache by id must serve both topics (Confluent does the same for identical schemas).
The avro suite itself runs against this server (tests/e2e/test_avro_pipeline.py, the `schema_registry`
variants of tests/unit/test_ticdc_avro.py, the avro conformance fixtures).
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError

from testbed.encoders.ticdc_avro import TiCDCAvroWriter
from testbed.tables import column, table_schema
from tests.decoding import avro_decoder
from ticdc_delta.schema_cache.events import RawMessage, RowChange, SchemaChange

pytestmark = [pytest.mark.e2e, pytest.mark.conformance]

TABLE = table_schema("shop", "copies", table_id=9, version=1, columns=[column("id", "int", nullable=False),
                                                                       column("v", "varchar")], primary_key=["id"])


def _record(field_type: str) -> Schema:
    return Schema(json.dumps({"type": "record", "name": "r", "fields": [{"name": "a", "type": field_type}]}), "AVRO")


def test_compatibility_and_refusals_are_the_producers_concern(apicurio):
    # Expect: NONE by default; under BACKWARD an incompatible schema is refused with 409 / error_code 0;
    # the product's own calls (a subject list, schemas by id) answer as Confluent's do.
    client = SchemaRegistryClient({"url": apicurio.url})
    assert client.get_compatibility() == "NONE"
    first = client.register_schema("compat-value", _record("int"))
    client.set_compatibility("compat-value", "BACKWARD")
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema("compat-value", _record("string"))
    assert (refused.value.http_status_code, refused.value.error_code) == (409, 0)
    assert "compat-value" in client.get_subjects()
    assert json.loads(client.get_schema(first).schema_str)["fields"][0]["type"] == "int"
    with pytest.raises(SchemaRegistryError) as missing:
        client.get_schema(first + 10_000)
    assert missing.value.http_status_code == 404


def test_one_content_id_for_two_topics_serves_both(apicurio):
    # Setup: one table's rows on two topics (a changefeed moved to a new topic), so its schemas are
    # registered under two subjects each: the same content, one id.
    # Expect: one id per schema across both subjects; one decoder decodes both topics' rows, each
    # topic's first row announcing the table (its structure), none failing on the shared cache entry.
    writer = TiCDCAvroWriter(apicurio.url)
    decoder = avro_decoder(apicurio.url)
    old_key, old_value = writer.row("tidb_shop_copies", TABLE, "INSERT", 1, None, {"id": 1, "v": "a"})
    new_key, new_value = writer.row("tidb_shop_copies_v2", TABLE, "INSERT", 2, None, {"id": 2, "v": "b"})
    assert old_value[1:5] == new_value[1:5] and old_key[1:5] == new_key[1:5]  # the same schema ids

    first = decoder.decode(RawMessage("tidb_shop_copies", 0, 0, old_key, old_value))
    second = decoder.decode(RawMessage("tidb_shop_copies_v2", 0, 0, new_key, new_value))

    assert [type(e) for e in first] == [SchemaChange, RowChange] and first[-1].after == (1, "a")
    assert second[-1].after == (2, "b") and isinstance(second[-1], RowChange)
