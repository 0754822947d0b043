"""SeaweedFS as a real S3-compatible object store for tests and the demo.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from types import TracebackType

from headrace.testing.process import (
    EmbeddedBrokerError,
    ServerProcess,
    free_port,
    scaled,
)

WEED_ENV = "HEADRACE_WEED"


def weed_binary() -> str | None:
    """SeaweedFS's ``weed``: ``$HEADRACE_WEED``, the one ``make setup`` builds into
    ``.tools/bin`` of the source tree, or one on ``PATH``; None if there is none."""
    explicit = os.environ.get(WEED_ENV)
    if explicit:
        return explicit
    built = Path(__file__).resolve().parents[3] / ".tools" / "bin" / "weed"
    if built.exists():
        return str(built)
    return shutil.which("weed")


class SeaweedS3(ServerProcess):
    """A real S3-compatible object store for tests and the demo: SeaweedFS (master,
    volume server, filer and S3 gateway in one ``weed server`` process) on free ports,
    with a temporary data directory removed on exit. ``endpoint`` is its S3 URL; access
    is anonymous (no identities configured). ``stop()`` and ``start()`` again keep the
    data (an outage test); ``kill()`` sends SIGKILL."""

    def __init__(self, host: str = "127.0.0.1", start_timeout: float = 60.0) -> None:
        binary = weed_binary()
        if binary is None:
            raise EmbeddedBrokerError("SeaweedFS's weed was not found: run `make setup` "
                                      f"(scripts/setup-weed.sh) or set {WEED_ENV}")
        self.binary = binary
        self.host = host
        self.dir = Path(tempfile.mkdtemp(prefix="headrace-weed-"))
        self.start_timeout = start_timeout
        self.process: subprocess.Popen[str] | None = None
        self.output: deque[str] = deque(maxlen=500)
        self.ports: dict[str, int] = {}

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.ports['s3']}"

    def start(self) -> SeaweedS3:
        """Start (or restart on the same ports and data) and wait until S3 answers."""
        if not self.ports:
            names = ("master", "master.grpc", "volume", "volume.grpc", "filer",
                     "filer.grpc", "s3", "s3.grpc")
            self.ports = {n: free_port(self.host) for n in names}
        p = self.ports
        cmd = [self.binary, "server", f"-dir={self.dir}", f"-ip={self.host}",
               f"-ip.bind={self.host}", f"-master.port={p['master']}",
               f"-master.port.grpc={p['master.grpc']}", f"-volume.port={p['volume']}",
               f"-volume.port.grpc={p['volume.grpc']}", f"-filer.port={p['filer']}",
               f"-filer.port.grpc={p['filer.grpc']}", "-s3", f"-s3.port={p['s3']}",
               f"-s3.port.grpc={p['s3.grpc']}", "-s3.port.iceberg=0", "-s3.port.lance=0",
               "-volume.max=100",
               "-master.volumeSizeLimitMB=64", "-metricsPort=0"]
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, cwd=self.dir)
        threading.Thread(target=self._drain, args=(self.process,), daemon=True).start()
        self._wait_s3()
        return self

    def _wait_s3(self) -> None:
        """Poll until an object can be stored (the gateway answers before the filer and
        volume servers are ready to store; after a restart the bucket exists already)."""
        import boto3
        from botocore.config import Config

        client = boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint, region_name="us-east-1",
            aws_access_key_id="any", aws_secret_access_key="any",
            config=Config(connect_timeout=1, read_timeout=5, retries={"max_attempts": 1}))
        deadline = time.monotonic() + scaled(self.start_timeout)
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise EmbeddedBrokerError("weed exited during start-up:\n"
                                          + "".join(self.output_lines()))
            try:
                try:
                    client.create_bucket(Bucket="headrace-ready")
                except client.exceptions.BucketAlreadyOwnedByYou:
                    pass
                except client.exceptions.BucketAlreadyExists:
                    pass
                client.put_object(Bucket="headrace-ready", Key="ready", Body=b"1")
                client.close()
                return
            except Exception:  # not up yet: any failure means try again
                if time.monotonic() > deadline:
                    client.close()
                    self.kill()
                    raise EmbeddedBrokerError("weed did not start in time:\n"
                                              + "".join(self.output_lines())) from None
                time.sleep(0.2)

    def __enter__(self) -> SeaweedS3:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
