"""A transactional consume-transform-produce loop (librdkafka), for crash tests.

Run from the repository root::

    python -m tests.integration.eos_worker --bootstrap HOST:PORT --input A --output B \\
        --group G --transactional-id T [--batch 20]

It reads ``A`` in group ``G`` (``isolation.level=read_committed``, no auto-commit; with
``--static``, static membership, so a restarted incarnation takes the old one's place at
once, else a short session timeout so a killed one leaves soon) and, per
polled batch, in one transaction of ``T``: writes every record to ``B`` with its value
prefixed by ``out-`` (same key, same partition), then sends the consumer's positions
with its group metadata (``send_offsets_to_transaction``) and commits. A restarted
incarnation with the same ``T`` fences the old one (``init_transactions``).

Crash-only error handling, as exactly-once applications may do it: a retriable commit
error retries the commit; an abortable one aborts and exits with code 2; a fatal one
(fenced) exits with code 3; a rebalance after the first assignment exits with code 2
(the next incarnation starts from the committed offsets). The caller restarts it.

Progress goes to stdout, one line per event: ``ready`` after ``init_transactions``,
``assigned P,P,..``, then per transaction ``begin N`` and ``committed N`` (N records).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from headrace.testing import scaled

EXIT_RESTART = 2
EXIT_FATAL = 3


def say(line: str) -> None:
    os.write(1, f"{time.monotonic():.3f} {line}\n".encode())


def transform(value: bytes) -> bytes:
    return b"out-" + value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--transactional-id", required=True)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--transaction-timeout-ms", type=int, default=10_000)
    ap.add_argument("--session-timeout-ms", type=int, default=1_000)
    ap.add_argument("--debug", default="", help="librdkafka debug contexts (to stderr)")
    ap.add_argument("--static", action="store_true",
                    help="static membership: group.instance.id derived from the transactional id")
    args = ap.parse_args(argv)

    common: dict[str, Any] = {"bootstrap.servers": args.bootstrap,
                              **({"debug": args.debug} if args.debug else {}),
                              "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200,
                              "retry.backoff.ms": 20, "retry.backoff.max.ms": 200,
                              # librdkafka 2.16 re-bootstraps when every broker is down (a
                              # killed broker) and then may leave send_offsets_to_transaction
                              # hanging on a decommissioned broker handle.
                              "metadata.recovery.strategy": "none"}
    producer = Producer({**common, "transactional.id": args.transactional_id,
                         "transaction.timeout.ms": int(scaled(args.transaction_timeout_ms)),
                         "linger.ms": 1})
    producer.init_transactions(scaled(30))
    say("ready")

    rebalances = 0

    def on_assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
        nonlocal rebalances
        rebalances += 1
        say("assigned " + ",".join(str(tp.partition) for tp in partitions))

    def on_revoke(consumer: Consumer, partitions: list[TopicPartition]) -> None:
        nonlocal rebalances
        rebalances += 1

    membership = {"group.instance.id": f"{args.transactional_id}-member"} if args.static else {}
    consumer = Consumer({**common, **membership, "group.id": args.group,
                         "session.timeout.ms": args.session_timeout_ms,
                         "heartbeat.interval.ms": max(args.session_timeout_ms // 10, 50),
                         # Also the rebalance timeout: how long a join waits for a member
                         # killed in the middle of its own join. Scaled: a slow machine
                         # must still get from one consume() to the next within it.
                         "max.poll.interval.ms": int(scaled(2000)),
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest",
                         # Short long-polls: a fetch parked at the end of a drained
                         # partition delays the offset lookups queued behind it.
                         "fetch.wait.max.ms": 20})
    consumer.subscribe([args.input], on_assign=on_assign, on_revoke=on_revoke,
                       on_lost=on_revoke)
    settled = False
    while True:
        before = rebalances
        msgs = consumer.consume(args.batch, 0.2)
        if settled and rebalances != before:
            # The positions of this batch may mix two assignments: start afresh instead.
            say("rebalanced")
            return EXIT_RESTART
        settled = settled or rebalances > 0
        msgs = [m for m in msgs if m.error() is None]
        if not msgs:
            continue
        say(f"begin {len(msgs)}")
        try:
            producer.begin_transaction()
            for m in msgs:
                value = m.value()
                assert value is not None
                while True:
                    try:
                        producer.produce(args.output, key=m.key(), value=transform(value),
                                         partition=m.partition())
                        break
                    except BufferError:
                        producer.poll(0.05)
            positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(),
                                                 scaled(30))
            commit(producer)
        except KafkaException as e:
            err: KafkaError = e.args[0]
            say(f"error {err}")
            if err.fatal():
                return EXIT_FATAL
            if err.txn_requires_abort():
                try:
                    producer.abort_transaction(scaled(30))
                except KafkaException as e2:
                    say(f"abort failed {e2.args[0]}")
            return EXIT_RESTART
        say(f"committed {len(msgs)}")


def commit(producer: Producer) -> None:
    """``commit_transaction``, retried while the error is retriable (librdkafka's rule)."""
    for _ in range(20):
        try:
            producer.commit_transaction(scaled(30))
            return
        except KafkaException as e:
            if not e.args[0].retriable():
                raise
            say(f"commit retry {e.args[0]}")
    producer.commit_transaction(scaled(30))


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    # librdkafka's destructors may wait for brokers: leave at once, like a crash would.
    os._exit(code)
