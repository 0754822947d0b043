"""Public test helpers: real servers as processes, for tests, notebooks and the demo.

``EmbeddedBroker`` runs a real headrace broker process (``python -m headrace broker``), so
tests talk to it over TCP exactly as clients would, and can ``kill -9`` and restart it on
the same data; ``ApacheKafka`` is the reference broker; ``SchemaRegistryProcess`` and
``ConsoleProcess`` our other servers; ``PostgresServer``, ``MariaDBServer`` and
``SeaweedS3`` throwaway databases and an S3 store. Every wait is derived from one knob:
``scaled(seconds)`` (``HEADRACE_TEST_TIMEOUT_SCALE``).
"""

from headrace.testing.broker import (
    LISTENER_PREFIX,
    METRICS_PREFIX,
    READY_PREFIX,
    EmbeddedBroker,
)
from headrace.testing.databases import MariaDBServer, PostgresServer
from headrace.testing.kafka import (
    ApacheKafka,
    format_kraft_storage,
    kafka_class_archive,
    kafka_java_command,
    write_kraft_properties,
)
from headrace.testing.process import (
    TIMEOUT_SCALE_ENV,
    EmbeddedBrokerError,
    ServerProcess,
    client_args,
    free_port,
    scaled,
    timeout_scale,
)
from headrace.testing.s3 import WEED_ENV, SeaweedS3, weed_binary
from headrace.testing.services import ConsoleProcess, SchemaRegistryProcess

__all__ = [
    "LISTENER_PREFIX", "METRICS_PREFIX", "READY_PREFIX", "TIMEOUT_SCALE_ENV", "WEED_ENV",
    "ApacheKafka", "ConsoleProcess", "EmbeddedBroker", "EmbeddedBrokerError",
    "MariaDBServer", "PostgresServer", "SchemaRegistryProcess", "SeaweedS3",
    "ServerProcess", "client_args", "format_kraft_storage", "free_port",
    "kafka_class_archive", "kafka_java_command", "scaled", "timeout_scale",
    "weed_binary", "write_kraft_properties",
]
