"""Confluent's serializers and deserializers (Avro, JSON Schema, Protobuf) through our
registry and a real broker topic: what a Python team's existing producer code does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from headrace.testing import EmbeddedBroker, scaled
from tests.registry.schemas import USER_V1, USER_V2, compile_proto


def _round_trip(broker: EmbeddedBroker, topic: str, values: list[bytes]) -> list[bytes]:
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(scaled(30)) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": topic,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        while len(got) < len(values):
            msg = consumer.poll(scaled(10))
            assert msg is not None, f"only {len(got)} of {len(values)} records came back"
            assert msg.error() is None, msg.error()
            got.append(msg.value())
    finally:
        consumer.close()
    return got


def test_avro_evolves_and_old_records_read_with_the_new_schema(
        broker: EmbeddedBroker, sr: SchemaRegistryClient, topic_name: str) -> None:
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    old = AvroSerializer(sr, USER_V1)
    new = AvroSerializer(sr, USER_V2)
    wire = [old({"id": 1, "name": "ada"}, ctx), new({"id": 2, "name": "bob", "email": "b@x"}, ctx)]
    assert wire[0][0] == 0 and wire[0][1:5] != wire[1][1:5]  # magic byte, two schema ids
    back = _round_trip(broker, topic_name, wire)
    reader = AvroDeserializer(sr, USER_V2)  # projects v1 data onto v2 (email defaults)
    assert [reader(v, ctx) for v in back] == [
        {"id": 1, "name": "ada", "email": None}, {"id": 2, "name": "bob", "email": "b@x"}]
    writer_schema = AvroDeserializer(sr)  # no reader schema: the writer's own
    assert writer_schema(back[0], ctx) == {"id": 1, "name": "ada"}
    assert sr.get_versions(f"{topic_name}-value") == [1, 2]


def test_json_schema_round_trip_and_validation(broker: EmbeddedBroker,
                                               sr: SchemaRegistryClient, topic_name: str) -> None:
    schema = json.dumps({"type": "object", "properties": {
        "id": {"type": "integer"}, "amount": {"type": "number", "minimum": 0}},
        "required": ["id", "amount"]})
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    serialize = JSONSerializer(schema, sr)
    wire = serialize({"id": 7, "amount": 12.5}, ctx)
    assert wire is not None
    back = _round_trip(broker, topic_name, [wire])
    assert JSONDeserializer(schema, schema_registry_client=sr)(back[0], ctx) == {
        "id": 7, "amount": 12.5}
    with pytest.raises(Exception, match="minimum"):
        serialize({"id": 8, "amount": -1}, ctx)


def test_protobuf_with_an_import_registers_its_reference(
        broker: EmbeddedBroker, sr: SchemaRegistryClient, topic_name: str,
        tmp_path: Path) -> None:
    suffix = topic_name.replace("-", "_")[-8:]
    common = f"hr_common_{suffix}"
    compile_proto(tmp_path, common, f"""syntax = "proto3"; package hr{suffix};
message Money {{ int64 units = 1; string currency = 2; }}""")
    module = compile_proto(tmp_path, f"hr_payment_{suffix}", f"""syntax = "proto3";
package hr{suffix};
import "{common}.proto";
import "google/protobuf/timestamp.proto";
message Payment {{ string id = 1; Money amount = 2; google.protobuf.Timestamp at = 3; }}""")
    payment: Any = module.Payment(id="p1")
    payment.amount.units = 42
    payment.amount.currency = "EUR"
    payment.at.seconds = 1_700_000_000
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    serialize = ProtobufSerializer(module.Payment, sr, {"use.deprecated.format": False})
    back = _round_trip(broker, topic_name, [serialize(payment, ctx)])
    decoded = ProtobufDeserializer(module.Payment, {"use.deprecated.format": False},
                                   schema_registry_client=sr)(back[0], ctx)
    assert decoded == payment
    latest = sr.get_latest_version(f"{topic_name}-value")
    assert [r.name for r in latest.schema.references] == [f"{common}.proto"]
    assert sr.get_versions(f"{common}.proto") == [1]
