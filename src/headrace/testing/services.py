"""The schema registry and the web console as processes for tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from types import TracebackType

from headrace.testing.process import (
    EmbeddedBrokerError,
    ServerProcess,
    client_args,
    free_port,
)


class SchemaRegistryProcess(ServerProcess):
    """A ``headrace registry`` subprocess against ``bootstrap_servers``, for tests.

    ``with SchemaRegistryProcess(broker.bootstrap_servers) as r: ... r.url``. ``start()``
    blocks until ``_schemas`` is replayed and HTTP is served; ``kill()`` is SIGKILL, and
    ``start()`` again comes back on the same port. ``topic`` and ``group`` as the CLI's;
    ``client_config``: the registry's Kafka client settings (``headrace -X``).
    """

    READY_MARKER = "headrace registry listening on "

    def __init__(self, bootstrap_servers: str, topic: str = "_schemas",
                 group: str = "headrace-schema-registry", host: str = "127.0.0.1",
                 start_timeout: float = 60.0,
                 client_config: Mapping[str, str] | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.client_config = dict(client_config or {})
        self.topic = topic
        self.group = group
        self.host = host
        self.port = free_port(host)
        self.start_timeout = start_timeout
        self.process: subprocess.Popen[str] | None = None
        self.output: deque[str] = deque(maxlen=500)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> SchemaRegistryProcess:
        """Start the process; wait until it serves. Blocks."""
        if self.process is not None and self.process.poll() is None:
            raise EmbeddedBrokerError("registry already running")
        cmd = [sys.executable, "-m", "headrace", *client_args(self.client_config),
               "registry", "--bootstrap-servers",
               self.bootstrap_servers, "--host", self.host, "--port", str(self.port),
               "--topic", self.topic, "--group", self.group]
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self._wait_ready(self.READY_MARKER, self.start_timeout, "registry")
        return self

    def __enter__(self) -> SchemaRegistryProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


class ConsoleProcess(ServerProcess):
    """A ``headrace console`` subprocess on ``bootstrap_servers`` (for tests and demos):
    ``with ConsoleProcess(servers) as c: ... c.url``. ``sample_seconds`` as the CLI's;
    ``client_config``: the console's Kafka client settings (``headrace -X``)."""

    READY_MARKER = "headrace console on "

    def __init__(self, bootstrap_servers: str, registry_url: str = "",
                 pipeline_metrics: Sequence[str] = (), host: str = "127.0.0.1",
                 sample_seconds: float = 5.0, start_timeout: float = 30.0,
                 client_config: Mapping[str, str] | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.client_config = dict(client_config or {})
        self.registry_url = registry_url
        self.pipeline_metrics = list(pipeline_metrics)
        self.host = host
        self.sample_seconds = sample_seconds
        self.start_timeout = start_timeout
        self.url = ""
        self.process: subprocess.Popen[str] | None = None
        self.output: deque[str] = deque(maxlen=500)

    def start(self) -> ConsoleProcess:
        """Start the process; wait until it serves. Blocks."""
        cmd = [sys.executable, "-m", "headrace", *client_args(self.client_config),
               "console", "-b", self.bootstrap_servers,
               "--host", self.host, "--port", "0", "--sample-seconds", str(self.sample_seconds)]
        if self.registry_url:
            cmd += ["--registry", self.registry_url]
        for url in self.pipeline_metrics:
            cmd += ["--pipeline-metrics", url]
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        line = self._wait_ready(self.READY_MARKER, self.start_timeout, "console")
        self.url = line.strip().rsplit(" ", 1)[1].rstrip("/")
        return self

    def __enter__(self) -> ConsoleProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
