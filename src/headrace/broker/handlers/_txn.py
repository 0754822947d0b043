"""Shared by the transaction handlers: PRODUCER_FENCED (KIP-588) only where the API
version knows it; older versions get INVALID_PRODUCER_EPOCH."""

from __future__ import annotations

from headrace.protocol.errors import ErrorCode


def fenced_code(code: int, api_version: int, first_version_with_fenced: int) -> int:
    if code == ErrorCode.PRODUCER_FENCED and api_version < first_version_with_fenced:
        return int(ErrorCode.INVALID_PRODUCER_EPOCH)
    return int(code)
