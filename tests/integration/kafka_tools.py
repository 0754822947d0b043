"""Apache Kafka's own command-line tools (``jvm/lib/kafka``), run as their shell scripts
would run them: ``kafka_tool("kafka-transactions", "--bootstrap-server", b, "list")``."""

from __future__ import annotations

import subprocess

from headrace.testing import kafka_java_command, scaled

# Script name -> the main class its kafka-run-class.sh line starts.
MAIN_CLASSES = {
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
}


def kafka_tool(name: str, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run Kafka's tool ``name`` with ``args``; blocks until it exits (a JVM start, 1-3 s).
    Raises ``headrace.jvm.JvmUnavailableError`` without the jars."""
    return subprocess.run(kafka_java_command(MAIN_CLASSES[name], *args), capture_output=True,
                          text=True, timeout=scaled(timeout))


def table(output: str) -> list[dict[str, str]]:
    """The rows of a tool's tab-separated table (header line first) as dicts."""
    lines = [line for line in output.splitlines() if line.strip()]
    if not lines:
        return []
    header = [h.strip() for h in lines[0].split("\t") if h.strip()]
    return [dict(zip(header, (v.strip() for v in line.split("\t")), strict=False))
            for line in lines[1:]]
