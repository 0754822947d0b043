"""Change data capture from PostgreSQL into the log: a consistent snapshot, then the WAL
through logical replication (``pgoutput``), as Debezium's change events.

``connector`` holds the design (one Kafka transaction per source transaction, LSNs
confirmed only after the log has them, heartbeats); ``pgoutput`` decodes the replication
messages, ``values`` maps PostgreSQL types as Debezium does, ``envelope`` builds the
events, ``postgres`` is the database side. CLI: ``headrace cdc postgres`` and
``headrace cdc status``.

MySQL/MariaDB: the binlog through python-mysql-replication (``mysql_connector`` holds the
design, ``mysql_stream`` reads the binlog, ``mysql`` is the database side and snapshot,
``mysql_values`` and ``mysql_envelope`` Debezium's MySQL values and events). CLI:
``headrace cdc mysql``.
"""
