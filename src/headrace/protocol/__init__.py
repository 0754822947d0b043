"""Kafka wire-protocol glue: error codes, record-batch framing helpers. No I/O."""
