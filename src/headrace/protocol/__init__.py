"""Kafka wire-protocol glue: error codes, record-batch framing helpers, Kafka's default
partitioner. No I/O."""
