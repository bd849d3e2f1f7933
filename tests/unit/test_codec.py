"""The one row codec: every protocol's structures are RowCodecs that pickle with the standard library."""

from __future__ import annotations

import pickle

import pytest

from testbed.changefeed import Changefeed
from testbed.encoders.canal import CanalJsonWriter
from testbed.encoders.debezium import DebeziumWriter
from testbed.encoders.open_protocol import OpenProtocolWriter
from tests.decoding import canal_decoder, debezium_decoder, decode, open_decoder, workload
from ticdc_delta.exceptions import InvalidMessage, ValueConversionError
from ticdc_delta.schema_cache.codec import ColumnCodec, RowCodec, ValueContext, text_value
from ticdc_delta.schema_cache.events import RowChange, TableName
from ticdc_delta.schema_cache.simple.decoder import SimpleDecoder
from ticdc_delta.schema_cache.types import TiDBType

PROTOCOLS = {
    "simple": (lambda: Changefeed(), SimpleDecoder),
    "debezium": (lambda: Changefeed(debezium_writer=DebeziumWriter()), debezium_decoder),
    "canal-json": (lambda: Changefeed(canal_writer=CanalJsonWriter(content_compatible=True)), canal_decoder),
    "open-protocol": (lambda: Changefeed(open_writer=OpenProtocolWriter()), open_decoder),
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_decoder_builds_picklable_codecs(protocol):
    # Setup: the all-types workload through each protocol's stand-in encoder and decoder.
    # Expect: the decoder's cached structures are RowCodecs; each survives a standard-library
    # pickle round trip (no closures or clients inside) and converts a row the same after it.
    feed, decoder_factory = PROTOCOLS[protocol]
    decoder = decoder_factory()
    events = decode(decoder, workload(feed()))
    codecs = [c for c in vars(decoder)["_structures" if protocol != "simple" else "_schemas"].values()]
    assert codecs and all(isinstance(c, RowCodec) for c in codecs)
    for codec in codecs:
        copy = pickle.loads(pickle.dumps(codec))
        assert copy == codec and copy.schema == codec.schema
    first = next(e for e in events if isinstance(e, RowChange))
    assert first.schema in {c.schema for c in codecs}


def test_codec_rows_and_the_column_a_bad_value_is_in():
    codec = RowCodec.build(
        TableName("d", "t"),
        [ColumnCodec("id", TiDBType("bigint"), text_value), ColumnCodec("at", TiDBType("date"), text_value)],
        ["id"],
        ValueContext(),
    )
    assert codec.schema.key == ("id",) and [c.spark_type for c in codec.schema.columns] == ["BIGINT", "DATE"]
    assert codec.row({"id": "7"}) == (7, None)
    assert pickle.loads(pickle.dumps(codec)).row({"id": "8", "at": "2026-01-02"})[0] == 8
    with pytest.raises(ValueConversionError, match=r"column 'at': cannot convert 'soon'"):
        codec.row({"id": "7", "at": "soon"})


def test_a_key_that_is_not_a_column_is_bad_input():
    with pytest.raises(InvalidMessage, match=r"key columns \['nope'\] are not columns of d.t"):
        RowCodec.build(TableName("d", "t"), [ColumnCodec("id", TiDBType("int"), text_value)], ["nope"], ValueContext())
