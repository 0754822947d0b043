"""The partition log: segment files, sparse offset/time indexes, recovery, retention.

Knows nothing about sockets; the broker drives it from its event loop.
"""
