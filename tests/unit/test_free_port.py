"""Server ports for tests and clusters (``headrace.testing.free_port``): picked under the
kernel's ephemeral range, where no outgoing connection takes its local port, and free."""

from __future__ import annotations

import socket

from headrace.testing.process import PORTS_BELOW_EPHEMERAL, _ephemeral_low, free_port


def test_ports_come_from_under_the_ephemeral_range_and_bind() -> None:
    low = _ephemeral_low()
    ports = {free_port() for _ in range(20)}
    assert all(low - PORTS_BELOW_EPHEMERAL <= p < low for p in ports), (low, ports)
    assert len(ports) > 1  # random, so that two pickers rarely meet
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_in_use_is_not_picked() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", free_port()))
        taken = held.getsockname()[1]
        assert all(free_port() != taken for _ in range(200))
