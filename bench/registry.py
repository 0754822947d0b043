"""Schema registry: registrations/s, lookups/s (uncached and client-cached) with latency
percentiles, and the per-record cost of Avro through the registry against plain JSON.

Usage::

    .venv/bin/python bench/registry.py                 # embedded broker + registry process
    .venv/bin/python bench/registry.py --schemas 2000 --records 200000

Starts a broker and a ``headrace registry`` process (separate processes, as deployed),
then, from this process over HTTP/1.1 keep-alive:

- registrations: ``--schemas`` distinct Avro schemas, each a new subject, one at a time
  (each is a Kafka transaction on ``_schemas`` plus the fold catching up);
- re-registration of an already registered schema (answered from the fold, no write);
- lookups by id (``GET /schemas/ids/{id}``) and by schema (``POST /subjects/{s}``), one
  client thread and ``--threads`` threads; every request reaches the registry;
- the same by-id lookups through ``confluent_kafka``'s ``SchemaRegistryClient`` (its cache
  answers after the first request per id, as a producer or consumer sees it);
- a producer-side loop: ``--records`` fraud transactions serialized by Confluent's
  ``AvroSerializer`` and read back by ``AvroDeserializer`` (schema from the registry,
  cached), against ``json.dumps``/``json.loads`` of the same dicts. No broker in that loop:
  it is the serializer's own cost per record.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from headrace.pipelines.fraud.avro import TRANSACTION_SCHEMA
from headrace.pipelines.fraud.config import FraudConfig
from headrace.pipelines.fraud.generator import FraudGenerator
from headrace.testing import EmbeddedBroker, SchemaRegistryProcess
from report import percentile


def _schema(n: int) -> str:
    return json.dumps({"type": "record", "name": f"Bench{n}", "fields": [
        {"name": "id", "type": "long"}, {"name": "name", "type": "string"},
        {"name": "score", "type": "double", "default": 0.0}]})


def _timed(label: str, n: int, call: Callable[[int], Any], threads: int = 1) -> None:
    latencies: list[float] = []
    lock = threading.Lock()

    def worker(offset: int) -> None:
        mine = []
        for i in range(offset, n, threads):
            t = time.perf_counter()
            call(i)
            mine.append((time.perf_counter() - t) * 1000)
        with lock:
            latencies.extend(mine)

    start = time.perf_counter()
    pool = [threading.Thread(target=worker, args=(w,)) for w in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - start
    print(f"  {label:<52} {n / elapsed:>9,.0f}/s   p50 {percentile(sorted(latencies), 50):6.2f} ms   "
          f"p99 {percentile(sorted(latencies), 99):6.2f} ms", flush=True)


def registry_figures(url: str, schemas: int, threads: int) -> None:
    http = httpx.Client(timeout=30)
    ids: list[int] = []

    def register(i: int) -> None:
        answer = http.post(f"{url}/subjects/bench-{i}/versions", json={"schema": _schema(i)})
        answer.raise_for_status()
        ids.append(answer.json()["id"])

    print(f"registry at {url}")
    _timed("register a new schema (new subject)", schemas, register)
    _timed("register an existing schema again", schemas, register)
    locals_ = threading.local()

    def client() -> httpx.Client:
        if not hasattr(locals_, "http"):
            locals_.http = httpx.Client(timeout=30)
        return locals_.http  # type: ignore[no-any-return]

    def by_id(i: int) -> None:
        client().get(f"{url}/schemas/ids/{ids[i % len(ids)]}").raise_for_status()

    def by_schema(i: int) -> None:
        n = i % schemas
        client().post(f"{url}/subjects/bench-{n}", json={"schema": _schema(n)}) \
            .raise_for_status()

    lookups = schemas * 4
    _timed("lookup by id, uncached (GET /schemas/ids/{id})", lookups, by_id)
    _timed(f"lookup by id, uncached, {threads} threads", lookups, by_id, threads)
    _timed("lookup by schema, uncached (POST /subjects/{s})", lookups, by_schema)
    _timed(f"lookup by schema, uncached, {threads} threads", lookups, by_schema, threads)
    cached = SchemaRegistryClient({"url": url})
    _timed("lookup by id, confluent_kafka client (cached)", lookups * 10,
           lambda i: cached.get_schema(ids[i % len(ids)]))


def serializer_figures(url: str, records: int) -> None:
    events = [json.loads(e.value) for e in FraudGenerator(FraudConfig(
        seed=1, rate=1000, duration_s=max(1, records // 1000) + 1, malformed_share=0.0,
        late_share=0.0)).stream(0) if e.kind == "txn"][:records]
    sr = SchemaRegistryClient({"url": url})
    ctx = SerializationContext("bench-transactions", MessageField.VALUE)
    serialize, deserialize = AvroSerializer(sr, TRANSACTION_SCHEMA), AvroDeserializer(sr)
    serialize(events[0], ctx)
    deserialize(serialize(events[0], ctx), ctx)

    def loop(encode: Callable[[Any], bytes], decode: Callable[[bytes], Any]) -> tuple[float, int]:
        start = time.perf_counter()
        size = 0
        for event in events:
            wire = encode(event)
            size += len(wire)
            decode(wire)
        return (time.perf_counter() - start) / len(events) * 1e6, size // len(events)

    avro_us, avro_size = loop(lambda e: serialize(e, ctx), lambda b: deserialize(b, ctx))
    json_us, json_size = loop(lambda e: json.dumps(e).encode(), json.loads)
    print(f"serializer round trip per record ({len(events):,} fraud transactions)")
    print(f"  Avro through the registry (AvroSerializer+Deserializer) {avro_us:6.2f} us  "
          f"{avro_size} B/record")
    print(f"  plain JSON (json.dumps + json.loads)                    {json_us:6.2f} us  "
          f"{json_size} B/record")
    print(f"  Avro / JSON time {avro_us / json_us:.2f}x, size {avro_size / json_size:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--schemas", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args()
    with EmbeddedBroker() as broker, SchemaRegistryProcess(broker.bootstrap_servers) as reg:
        registry_figures(reg.url, args.schemas, args.threads)
        serializer_figures(reg.url, args.records)
    print(f"machine load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
