"""headrace: an event-streaming platform for Python teams.

A durable, partitioned, log-based broker that speaks the Kafka wire protocol, and the
pipelines that run on Apache Spark against it.
"""

from headrace.errors import HeadraceError

__version__ = "0.1.0"

__all__ = ["HeadraceError", "__version__"]
