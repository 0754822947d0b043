"""read_events with a schema registry: values written by Confluent's serializers (Avro in
two schema versions, JSON Schema, Protobuf) are decoded with their writer's schema and
projected onto the query's; foreign bytes, unknown ids and undecodable payloads are dead
letters with the reason; a registry that can't be reached fails the query instead."""

from __future__ import annotations

import datetime as dt
import json
import struct
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import SparkSession

from headrace.spark import read_events
from headrace.testing import EmbeddedBroker, SchemaRegistryProcess
from tests.registry.schemas import compile_proto
from tests.spark.kafka_helpers import produce, read_all

pytestmark = pytest.mark.spark

QUERY = "card_id string not null, amount double not null, ts timestamp not null, city string"
T0 = 1_700_000_000_000

TXN_V1 = json.dumps({"type": "record", "name": "Txn", "fields": [
    {"name": "card_id", "type": "string"}, {"name": "amount", "type": "double"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "unused", "type": "int", "default": 0}]})
TXN_V2 = json.dumps({"type": "record", "name": "Txn", "fields": [
    {"name": "card_id", "type": "string"}, {"name": "amount", "type": "double"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "unused", "type": "int", "default": 0},
    {"name": "city", "type": ["null", "string"], "default": None}]})


def _when(offset_ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp((T0 + offset_ms) / 1000, tz=dt.UTC)


def _protobuf_module(tmp: Path, name: str) -> ModuleType:
    return compile_proto(tmp, name, f"""syntax = "proto3"; package {name};
import "google/protobuf/timestamp.proto";
message Txn {{ string card_id = 1; double amount = 2; google.protobuf.Timestamp ts = 3;
               string city = 4; }}""")


def test_avro_json_and_protobuf_values_become_typed_rows(
        spark: SparkSession, broker: EmbeddedBroker, registry: SchemaRegistryProcess,
        topic_name: str, tmp_path: Path) -> None:
    sr = SchemaRegistryClient({"url": registry.url})
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    values: list[bytes] = [
        AvroSerializer(sr, TXN_V1)({"card_id": "a1", "amount": 1.5, "ts": _when(0),
                                    "unused": 9}, ctx),
        AvroSerializer(sr, TXN_V2)({"card_id": "a2", "amount": 2.0, "ts": _when(1),
                                    "city": "Oslo"}, ctx)]
    json_ctx = SerializationContext(topic_name + "-json", MessageField.VALUE)
    values.append(JSONSerializer(json.dumps({"type": "object"}), sr)(
        {"card_id": "j1", "amount": 3, "ts": T0 + 2}, json_ctx))
    module = _protobuf_module(tmp_path, "hr" + topic_name.replace("-", "")[-10:].lower())
    message: Any = module.Txn(card_id="p1", amount=4.25, city="Rome")
    message.ts.FromMilliseconds(T0 + 3)
    proto_ctx = SerializationContext(topic_name + "-proto", MessageField.VALUE)
    values.append(ProtobufSerializer(module.Txn, sr, {"use.deprecated.format": False})(
        message, proto_ctx))
    unknown_id = b"\x00" + struct.pack(">I", 2**31 - 5) + b"\x02"
    bad = [(b"plain", b'{"card_id": "x"}', "wire format"),
           (b"unknown", unknown_id, "unknown schema id"),
           (b"torn", values[0][:7], "undecodable Avro")]
    produce(broker.bootstrap_servers, topic_name,
            [(f"k{i}".encode(), v) for i, v in enumerate(values)]
            + [(k, v) for k, v, _ in bad])
    dlq = topic_name + "-dlq"
    rows = read_events(spark, topic_name, QUERY, event_time="ts", dead_letter_topic=dlq,
                       streaming=False, schema_registry_url=registry.url,
                       kafka_bootstrap_servers=broker.bootstrap_servers).collect()
    assert sorted((r.card_id, r.amount, r.city, r.event_time.astimezone(dt.UTC))
                  for r in rows) == [
        ("a1", 1.5, None, _when(0)), ("a2", 2.0, "Oslo", _when(1)),
        ("j1", 3.0, None, _when(2)), ("p1", 4.25, "Rome", _when(3))]
    dead = {m.key(): m for m in read_all(broker.bootstrap_servers, dlq)}
    assert set(dead) == {k for k, _, _ in bad}
    for key, value, reason in bad:
        assert dead[key].value() == value
        assert reason in dict(dead[key].headers())["headrace.error"].decode()


def test_an_unreachable_registry_fails_the_read_instead_of_dead_lettering(
        spark: SparkSession, broker: EmbeddedBroker, registry: SchemaRegistryProcess,
        topic_name: str) -> None:
    sr = SchemaRegistryClient({"url": registry.url})
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    value = AvroSerializer(sr, TXN_V1)({"card_id": "a1", "amount": 1.5, "ts": _when(0)}, ctx)
    produce(broker.bootstrap_servers, topic_name, [(b"k", value)])
    dlq = topic_name + "-dlq"
    df = read_events(spark, topic_name, QUERY, event_time="ts", dead_letter_topic=dlq,
                     streaming=False, schema_registry_url="http://127.0.0.1:9",
                     kafka_bootstrap_servers=broker.bootstrap_servers)
    with pytest.raises(Exception, match="unreachable"):
        df.collect()
    assert read_all(broker.bootstrap_servers, dlq) == []


def test_bad_registry_url_option(spark: SparkSession, broker: EmbeddedBroker) -> None:
    with pytest.raises(Exception, match="http"):
        read_events(spark, "t", QUERY, event_time="ts", dead_letter_topic="d",
                    schema_registry_url="localhost:8081",
                    kafka_bootstrap_servers=broker.bootstrap_servers)


def test_sink_writes_struct_values_as_avro_through_the_registry(
        spark: SparkSession, broker: EmbeddedBroker, registry: SchemaRegistryProcess,
        topic_name: str) -> None:
    """format("headrace") with schemaRegistryUrl: the struct value becomes Avro under
    <topic>-value; Confluent's deserializer and read_events both read it back."""
    from confluent_kafka.schema_registry.avro import AvroDeserializer

    rows = [("a1", 1.5, T0, {"x": 1}), ("a2", 2.5, T0 + 1, None)]
    df = spark.createDataFrame(rows, "card_id string, amount double, ts long, "
                                     "tags map<string,int>")
    out = df.selectExpr("card_id AS key", "struct(card_id, amount, timestamp_millis(ts) AS ts, "
                                          "tags) AS value")
    (out.write.format("headrace").option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .option("topic", topic_name).option("schemaRegistryUrl", registry.url)
        .mode("append").save())
    sr = SchemaRegistryClient({"url": registry.url})
    registered = sr.get_latest_version(f"{topic_name}-value")
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    decode = AvroDeserializer(sr)
    got = sorted((decode(m.value(), ctx) for m in read_all(broker.bootstrap_servers, topic_name)),
                 key=lambda r: r["card_id"])
    assert [(r["card_id"], r["amount"], r["ts"], r["tags"]) for r in got] == [
        ("a1", 1.5, _when(0), {"x": 1}), ("a2", 2.5, _when(1), None)]
    back = read_events(spark, topic_name, QUERY, event_time="ts",
                       dead_letter_topic=topic_name + "-dlq", streaming=False,
                       schema_registry_url=registry.url,
                       kafka_bootstrap_servers=broker.bootstrap_servers).collect()
    assert sorted(r.card_id for r in back) == ["a1", "a2"]
    # an incompatible value shape is refused when the write starts, nothing is written
    clash = spark.createDataFrame([("a3",)], "card_id string").selectExpr(
        "card_id AS key", "struct(1 AS card_id) AS value")
    with pytest.raises(Exception, match="incompatible"):
        (clash.write.format("headrace").option("kafka.bootstrap.servers",
                                               broker.bootstrap_servers)
            .option("topic", topic_name).option("schemaRegistryUrl", registry.url)
            .mode("append").save())
    assert len(read_all(broker.bootstrap_servers, topic_name)) == 2
    assert sr.get_latest_version(f"{topic_name}-value").version == registered.version
