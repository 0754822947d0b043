"""Errors of the change-data-capture connector (``headrace.cdc``)."""

from __future__ import annotations

import re

from headrace.errors import HeadraceError

_SECRET = re.compile(r"""(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]+)|(://[^:/@\s]+:)([^@\s]+)(@)""",
                     re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with every password of a libpq DSN (``password=...``, quoted or not) or
    URL (``postgresql://user:secret@host``) replaced by ``***``."""
    return _SECRET.sub(lambda m: f"{m.group(1)}***" if m.group(1) else
                       f"{m.group(3)}***{m.group(5)}", text)


class CdcError(HeadraceError):
    """Base class of the connector's errors."""


class CdcConfigError(CdcError):
    """The database or the options can't be captured as asked (missing table, wal_level not
    logical, no replication privilege, a table without a primary key...)."""


class SlotLostError(CdcError):
    """The replication slot the connector's offsets point into is gone or invalidated: the
    changes in between are lost. The way out is a new snapshot (``--snapshot always``)."""


class DecodeError(CdcError):
    """A pgoutput message that does not parse."""
