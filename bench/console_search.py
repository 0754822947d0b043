"""The console's message search over a large topic: how long finding one record by a
header takes when it has to read the whole topic.

Usage::

    .venv/bin/python bench/console_search.py               # 1 GB: 1,000,000 records of 1 KiB
    .venv/bin/python bench/console_search.py --records 100000

Produces ``--records`` records (``--size`` bytes each, 4 partitions, a ``trace`` header on
every record) to an embedded broker; exactly one record, in the middle of partition 2,
carries ``trace=needle``. Then runs the browser's search (``headrace.console.browse.search``,
what ``/topics/{t}/messages?header=trace%3Dneedle&scan=...`` runs) from the log start,
scanning everything, and prints the time, records/s and MB/s. Also the same search by
key substring, and a search by value substring.
"""

from __future__ import annotations

import argparse
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.console.browse import MAX_SCAN, Decoder, Search, search
from headrace.testing import EmbeddedBroker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024)
    args = parser.parse_args()
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("big", 4, 1)])["big"].result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                             "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000,
                             "compression.type": "none"})
        payload = b"x" * args.size
        needle_at = args.records // 2
        t0 = time.perf_counter()
        for i in range(args.records):
            header = b"needle" if i == needle_at else b"t-%d" % i
            while True:
                try:
                    producer.produce("big", value=payload, key=b"key-%d" % i,
                                     partition=2 if i == needle_at else i % 4,
                                     headers=[("trace", header)])
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.flush()
        gb = args.records * args.size / 1e9
        print(f"produced {args.records:,} records ({gb:.2f} GB) in "
              f"{time.perf_counter() - t0:.1f} s")
        for label, query in (
                ("header trace=needle", Search(header="trace=needle", scan=MAX_SCAN, limit=10)),
                ("key contains 'key-500000'", Search(key=f"key-{needle_at}", scan=MAX_SCAN,
                                                     limit=10)),
                ("value contains 'y' (no match)", Search(value="y", scan=MAX_SCAN, limit=10))):
            t0 = time.perf_counter()
            result = search(bootstrap, "big", query, Decoder())
            seconds = time.perf_counter() - t0
            print(f"search {label:32} found {len(result.records)}, scanned "
                  f"{result.scanned:,} in {seconds:.2f} s: {result.scanned / seconds:,.0f} "
                  f"records/s, {result.scanned * args.size / seconds / 1e6:,.0f} MB/s")


if __name__ == "__main__":
    main()
