"""A schema registry that speaks Confluent Schema Registry's REST API and wire format.

Everything it knows lives in one compacted, single-partition topic (``_schemas``) on any
Kafka-protocol broker, ours or Apache Kafka: schemas by (subject, version), compatibility
levels and modes, in Confluent's own record layout. A process replays the topic on start,
so a restarted or second instance serves the same ids. Modules, bottom up:

- ``errors``: Confluent's error codes.
- ``formats``: parsing, canonical forms and compatibility rules of Avro, JSON Schema and
  Protobuf, each behind the same small interface.
- ``state``: the in-memory view folded from ``_schemas``, and the decisions taken on it.
- ``store``: the Kafka side: replay, and fenced transactional writes.
- ``service``: the operations of the REST API.
- ``http``: the aiohttp application; ``client``: a thin client for the CLI.
"""
