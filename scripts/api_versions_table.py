"""Print the broker's ApiVersions as a markdown table (for COMPATIBILITY.md).

Starts an ``EmbeddedBroker`` (or uses ``--bootstrap HOST:PORT``), sends one ApiVersions
v3 request over a plain socket and names each API key with kafka-python's ``ApiKey``
enum. Run: ``.venv/bin/python scripts/api_versions_table.py``.
"""

from __future__ import annotations

import argparse
import socket
import struct
from typing import Any

from kafka.protocol.api_key import ApiKey
from kafka.protocol.broker_version_data import infer_broker_version_from_api_versions
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from headrace.testing import EmbeddedBroker

API_VERSIONS_VERSION = 3


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)


def fetch_api_versions(bootstrap: str, timeout: float = 10.0) -> Any:
    """One ApiVersions v3 round trip; returns the decoded response. Blocks."""
    host, port = bootstrap.rsplit(":", 1)
    request = ApiVersionsRequest(
        client_software_name="headrace-api-versions-table", client_software_version="1"
    )
    request.API_VERSION = API_VERSIONS_VERSION
    request.with_header(correlation_id=1, client_id="api-versions-table")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(request.encode(header=True, framed=True))
        (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
        payload = _recv_exactly(sock, size)
    # The ApiVersions response header is always v0 (correlation id only), KIP-511.
    (correlation_id,) = struct.unpack(">i", payload[:4])
    if correlation_id != 1:
        raise ValueError(f"unexpected correlation id {correlation_id}")
    return ApiVersionsResponse.decode(payload[4:], version=API_VERSIONS_VERSION)


def _name(api_key: int) -> str:
    try:
        return str(ApiKey(api_key).name)
    except ValueError:
        return f"(unknown {api_key})"


def markdown_table(response: Any) -> str:
    rows = sorted((k.api_key, k.min_version, k.max_version) for k in response.api_keys)
    lines = ["| API key | Name | Min version | Max version |", "|---:|---|---:|---:|"]
    lines += [f"| {key} | {_name(key)} | {lo} | {hi} |" for key, lo, hi in rows]
    inferred = infer_broker_version_from_api_versions({key: (lo, hi) for key, lo, hi in rows})
    lines += [
        "",
        f"kafka-python infers the broker as Kafka {'.'.join(map(str, inferred))} from this table.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="an already running broker (default: start one)")
    args = parser.parse_args()
    if args.bootstrap:
        response = fetch_api_versions(args.bootstrap)
    else:
        with EmbeddedBroker() as broker:
            response = fetch_api_versions(broker.bootstrap_servers)
    if response.error_code != 0:
        raise SystemExit(f"ApiVersions error code {response.error_code}")
    print(markdown_table(response))


if __name__ == "__main__":
    main()
