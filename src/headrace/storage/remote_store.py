"""The object store behind tiered storage: a small ``RemoteStorage`` protocol, and the
plain-filesystem store for a single machine (``remote_s3`` has the S3 one).

Keys are ``/``-separated names (``<topic>-<topic id>/<partition>/<base>-<id>.log``).
Every method blocks (network or disk I/O): the broker calls them on worker threads, never
on its event loop. Every failure of the store itself (down, refusing, timing out) raises
``RemoteStorageError``, which a reader answers with the retriable KAFKA_STORAGE_ERROR; a
missing object raises ``RemoteObjectMissingError``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import BinaryIO, Protocol

from headrace.storage.errors import StorageError
from headrace.storage.swap import fsync_dir


class RemoteStorageError(StorageError):
    """The object store failed an operation; retrying later may succeed."""


class RemoteObjectMissingError(RemoteStorageError):
    """The object asked for does not exist in the store."""


class RemoteStorage(Protocol):
    """What tiered storage needs of an object store. Implementations are thread-safe."""

    def put(self, key: str, source: BinaryIO, length: int) -> None:
        """Store ``length`` bytes read from ``source`` (at its current position) under
        ``key``, replacing any object of that name; visible whole or not at all."""
        ...

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object (fewer at its end)."""
        ...

    def get(self, key: str) -> bytes:
        """The whole object."""
        ...

    def delete(self, keys: list[str]) -> None:
        """Delete the objects; a missing one is not an error (idempotent)."""
        ...

    def list(self, prefix: str) -> list[str]:
        """The keys starting with ``prefix``."""
        ...

    def sizes(self, prefix: str) -> dict[str, int]:
        """The keys starting with ``prefix``, each with its object's size in bytes."""
        ...

    def delete_tree(self, prefix: str) -> None:
        """Delete every object whose key starts with ``prefix`` (idempotent)."""
        ...

    def close(self) -> None:
        ...


class FilesystemStorage:
    """Objects as files under ``root`` (a second disk, a network mount). A put writes a
    temporary file, fsyncs it and renames it into place."""

    def __init__(self, root: Path) -> None:
        self.root = root
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RemoteStorageError(f"remote storage directory {root}: {e}") from e

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise RemoteStorageError(f"illegal object key {key!r}")
        return self.root.joinpath(*parts)

    def put(self, key: str, source: BinaryIO, length: int) -> None:
        path = self._path(key)
        tmp = path.with_name(path.name + ".part")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as out:
                remaining = length
                while remaining > 0:
                    chunk = source.read(min(remaining, 4 * 1024 * 1024))
                    if not chunk:
                        break
                    out.write(chunk)
                    remaining -= len(chunk)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
            fsync_dir(path.parent)
        except OSError as e:
            raise RemoteStorageError(f"put {key}: {e}") from e

    def get_range(self, key: str, start: int, end: int) -> bytes:
        try:
            with open(self._path(key), "rb") as f:
                return os.pread(f.fileno(), max(end - start, 0), start)
        except FileNotFoundError as e:
            raise RemoteObjectMissingError(f"no object {key}") from e
        except OSError as e:
            raise RemoteStorageError(f"get {key}: {e}") from e

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError as e:
            raise RemoteObjectMissingError(f"no object {key}") from e
        except OSError as e:
            raise RemoteStorageError(f"get {key}: {e}") from e

    def delete(self, keys: list[str]) -> None:
        try:
            for key in keys:
                self._path(key).unlink(missing_ok=True)
        except OSError as e:
            raise RemoteStorageError(f"delete: {e}") from e

    def list(self, prefix: str) -> list[str]:
        return sorted(self.sizes(prefix))

    def sizes(self, prefix: str) -> dict[str, int]:
        found: dict[str, int] = {}
        for dirpath, _, files in os.walk(self.root):
            for name in files:
                if name.endswith(".part"):
                    continue
                path = Path(dirpath, name)
                key = path.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    try:
                        found[key] = path.stat().st_size
                    except FileNotFoundError:
                        continue  # deleted meanwhile
                    except OSError as e:
                        raise RemoteStorageError(f"list {prefix}: {e}") from e
        return found

    def delete_tree(self, prefix: str) -> None:
        shutil.rmtree(self._path(prefix.rstrip("/")), ignore_errors=True)

    def close(self) -> None:
        pass
