"""The ``headrace`` command line (``app.main``; ``python -m headrace`` runs it too).

One module per command or command group (``topics``, ``groups``, ``transactions``, ``registry``,
``cdc``, ``bank``, ``users``, ``acls``, ``capacity``, ``console``), ``app`` for the
top-level commands (``broker``, ``produce``, ``consume``, ``demo``) and the dispatch, and
``terminal`` for the consoles, option types and table helpers they share. The logic behind
the client commands lives in ``headrace.ops``.

This is the top of the import layers: it may import every component, and none imports it.
Client commands reach a broker only through real Kafka clients (confluent-kafka, and
kafka-python for the transaction APIs librdkafka lacks), never through broker internals, so
they work unchanged against any Kafka-protocol broker. The one exception is
``headrace broker``, which starts the broker in-process.
"""
