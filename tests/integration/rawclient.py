"""A bare-socket Kafka client for tests that must send what real clients never would."""

from __future__ import annotations

import socket
import ssl
import struct
from typing import Any

from headrace.testing import scaled


class RawClient:
    """One TCP connection (TLS with ``tls``); frames requests with kafka-python's codec, or
    sends raw bytes."""

    def __init__(self, bootstrap: str, timeout: float = 10.0,
                 tls: ssl.SSLContext | None = None) -> None:
        host, port = bootstrap.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=scaled(timeout))
        self.sock = tls.wrap_socket(sock, server_hostname=host) if tls is not None else sock
        self.correlation_id = 0

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, req: Any, version: int) -> Any:
        """Send ``req`` at ``version`` and decode the response of the same version."""
        self.correlation_id += 1
        req.with_header(correlation_id=self.correlation_id, client_id="raw-test")
        self.send_raw(bytes(req.encode(version=version, header=True, framed=True)))
        frame = self.read_frame()
        if frame is None:
            raise ConnectionError("broker closed the connection")
        response_class = req.header.get_response_class()
        return response_class.decode(frame, header=True)

    def read_frame(self) -> bytes | None:
        """The next response frame (without its size), or None when the broker closed."""
        head = self._read_exactly(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._read_exactly(size)

    def is_closed_by_peer(self) -> bool:
        """True when the broker closed the connection (EOF or reset)."""
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True

    def _read_exactly(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
                return None
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
