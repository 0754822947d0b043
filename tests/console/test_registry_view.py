"""The console with a schema registry: Avro values decoded in the browser, schemas listed."""

from __future__ import annotations

import re
import urllib.request
import uuid

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from headrace.testing import ConsoleProcess, EmbeddedBroker, SchemaRegistryProcess, scaled

SCHEMA = ('{"type": "record", "name": "Payment", "fields": [{"name": "card", "type": "string"},'
          ' {"name": "cents", "type": "long"}]}')


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=scaled(30)) as r:
        return str(r.read().decode())


def test_avro_values_are_decoded_and_schemas_listed(broker: EmbeddedBroker,
                                                    registry: SchemaRegistryProcess) -> None:
    topic = f"payments-{uuid.uuid4().hex[:6]}"
    serialize = AvroSerializer(SchemaRegistryClient({"url": registry.url}), SCHEMA)
    p = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(3):
        p.produce(topic, key=f"c{i}".encode(), value=serialize(
            {"card": f"card-{i}", "cents": 100 * i},
            SerializationContext(topic, MessageField.VALUE)))
    p.flush()
    with ConsoleProcess(broker.bootstrap_servers, registry_url=registry.url) as web:
        page = get(f"{web.url}/topics/{topic}/messages?key=c2")
        value = re.search(r'<pre class="avro">(.*?)</pre>', page, re.S)
        assert value is not None, page
        assert value.group(1).replace("&#34;", '"').split() == [
            "{", '"card":', '"card-2",', '"cents":', "200", "}"]
        schemas = get(f"{web.url}/schemas")
        assert f"{topic}-value" in schemas and "Payment" in schemas
