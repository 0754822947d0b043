"""The S3 implementation of ``RemoteStorage`` (any S3 API: AWS, SeaweedFS, MinIO), on
boto3. Thread-safe: boto3 clients may be shared between threads. Every botocore failure
(connection refused, timeout, 5xx) becomes ``RemoteStorageError``; retries are short so a
store that is down fails fast and the broker's own loop retries later.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, BinaryIO

from headrace.storage.remote_store import RemoteObjectMissingError, RemoteStorageError

MULTIPART_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class S3Settings:
    endpoint: str
    bucket: str
    access_key: str = ""
    secret_key: str = ""
    region: str = "us-east-1"
    # seconds; a fetch waiting on a dead store must give up well within a client's timeout
    timeout: float = 5.0  # seconds, connect and read, per attempt


class S3Storage:
    """Objects in ``settings.bucket``, created on first use if missing."""

    def __init__(self, settings: S3Settings) -> None:
        import boto3
        from botocore.config import Config

        self.settings = settings
        self.bucket = settings.bucket
        self._client: Any = boto3.session.Session().client(
            "s3", endpoint_url=settings.endpoint or None, region_name=settings.region,
            aws_access_key_id=settings.access_key or None,
            aws_secret_access_key=settings.secret_key or None,
            config=Config(connect_timeout=settings.timeout, read_timeout=settings.timeout,
                          retries={"max_attempts": 2, "mode": "standard"},
                          s3={"addressing_style": "path"},
                          request_checksum_calculation="when_required",
                          response_checksum_validation="when_required"))
        self._bucket_ready = False

    def _call(self, what: str, fn: Any, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(**kwargs)
        except ClientError as e:
            code = str(e.response.get("Error", {}).get("Code", ""))
            if code in ("NoSuchKey", "404", "NotFound"):
                raise RemoteObjectMissingError(f"{what}: no such object") from e
            raise RemoteStorageError(f"{what}: {e}") from e
        except BotoCoreError as e:
            raise RemoteStorageError(f"{what}: {e}") from e

    def _ensure_bucket(self) -> None:
        if self._bucket_ready:
            return
        try:
            self._call("head bucket", self._client.head_bucket, Bucket=self.bucket)
        except RemoteObjectMissingError:
            self._call("create bucket", self._client.create_bucket, Bucket=self.bucket)
        self._bucket_ready = True

    def put(self, key: str, source: BinaryIO, length: int) -> None:
        """One PUT up to ``MULTIPART_BYTES``; above, a multipart upload streamed from
        ``source`` in parts of that size (a 1 GiB segment never sits in memory whole)."""
        self._ensure_bucket()
        if length <= MULTIPART_BYTES:
            body = source.read(length)
            self._call(f"put {key}", self._client.put_object, Bucket=self.bucket, Key=key,
                       Body=body, ContentLength=len(body))
            return
        from boto3.exceptions import S3UploadFailedError
        from boto3.s3.transfer import TransferConfig

        config = TransferConfig(multipart_threshold=MULTIPART_BYTES,
                                multipart_chunksize=MULTIPART_BYTES, use_threads=False)
        try:
            self._call(f"put {key}", self._client.upload_fileobj, Fileobj=source,
                       Bucket=self.bucket, Key=key, Config=config)
        except S3UploadFailedError as e:
            raise RemoteStorageError(f"put {key}: {e}") from e

    def get_range(self, key: str, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        resp = self._call(f"get {key}", self._client.get_object, Bucket=self.bucket,
                          Key=key, Range=f"bytes={start}-{end - 1}")
        return self._read_body(key, resp)

    def get(self, key: str) -> bytes:
        resp = self._call(f"get {key}", self._client.get_object, Bucket=self.bucket, Key=key)
        return self._read_body(key, resp)

    def _read_body(self, key: str, resp: Any) -> bytes:
        from botocore.exceptions import BotoCoreError

        try:
            return bytes(resp["Body"].read())
        except (BotoCoreError, OSError) as e:
            raise RemoteStorageError(f"get {key}: {e}") from e

    def delete(self, keys: list[str]) -> None:
        self._ensure_bucket()
        for i in range(0, len(keys), 1000):
            chunk = [{"Key": k} for k in keys[i : i + 1000]]
            if chunk:
                self._call("delete", self._client.delete_objects, Bucket=self.bucket,
                           Delete={"Objects": chunk, "Quiet": True})

    def list(self, prefix: str) -> list[str]:
        return sorted(self.sizes(prefix))

    def sizes(self, prefix: str) -> dict[str, int]:
        self._ensure_bucket()
        found: dict[str, int] = {}
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
            if token:
                kwargs["ContinuationToken"] = token
            resp = self._call("list", self._client.list_objects_v2, **kwargs)
            found.update((str(o["Key"]), int(o["Size"])) for o in resp.get("Contents", []))
            if not resp.get("IsTruncated"):
                return found
            token = resp.get("NextContinuationToken")

    def delete_tree(self, prefix: str) -> None:
        self.delete(self.list(prefix))

    def close(self) -> None:
        self._client.close()
