"""Operator tooling: what the ``headrace`` commands (``headrace.cli``) and the web console
(``headrace.console``) do, without their user interfaces: topics, groups and offset resets,
transactions, capacity sampling, produce and consume, the payments demo.

Everything here talks to a broker only through real Kafka clients (confluent-kafka, and
kafka-python for the transaction APIs librdkafka lacks), never through broker internals, so
it works unchanged against any Kafka-protocol broker.
"""
