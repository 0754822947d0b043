"""Operator tooling: the ``headrace`` command line.

Everything here talks to a broker only through a real Kafka client (confluent-kafka), never
through broker internals, so every command works unchanged against any Kafka-protocol broker.
The one exception is ``headrace broker``, which starts the broker in-process.
"""
