"""Operator tooling: the ``headrace`` command line.

Everything here talks to a broker only through real Kafka clients (confluent-kafka, and
kafka-python for the transaction APIs librdkafka lacks), never through broker internals, so
every command works unchanged against any Kafka-protocol broker.
The one exception is ``headrace broker``, which starts the broker in-process.
"""
