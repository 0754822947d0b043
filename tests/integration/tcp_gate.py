"""A plain TCP forwarder that can be shut like a gate: ``close()`` drops every connection
and refuses new ones (as a server that went away does), ``open()`` serves again on the
same port, ``hold()`` keeps accepting but forwards nothing (a server that hangs). Tests put it between a client and a server to make the server unreachable for
a while without restarting it. Threads, blocking sockets; ``close``/``open`` return at
once."""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpGate:
    def __init__(self, upstream: tuple[str, int], host: str = "127.0.0.1") -> None:
        self.upstream = upstream
        self.host = host
        self.port = 0
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.holding = False

    def open(self) -> TcpGate:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            if self.holding:
                with self._lock:
                    self._conns.add(client)  # never answered; dropped by close()
                continue
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns |= {client, server}
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            with self._lock:
                self._conns -= {src, dst}

    def hold(self) -> None:
        """From now on, connections are accepted and never answered (existing ones drop)."""
        self.close()
        self.holding = True
        self.open()

    def close(self) -> None:
        self.holding = False
        if self._listener is not None:
            # shutdown wakes the thread blocked in accept(); close alone would leave the
            # kernel socket listening until that call returns
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
