"""The store settings of a backfill that reads tiered segments straight from the object
store (``headrace.remote.storage.*``): accepted with the brokers' names, refused with a
one-line ``OptionError`` when incomplete, misspelt or on a stream."""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.spark.errors import OptionError
from headrace.spark.options import parse_source_options

BASE = {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "t"}


def test_store_settings_with_the_brokers_names() -> None:
    opts = parse_source_options({**BASE, "headrace.remote.storage.kind": "s3",
                                 "headrace.remote.storage.s3.endpoint": "http://s3:8333",
                                 "headrace.remote.storage.s3.bucket": "cold"}, streaming=False)
    assert opts.remote is not None and opts.remote.kind == "s3"
    assert (opts.remote.s3.endpoint, opts.remote.s3.bucket) == ("http://s3:8333", "cold")
    files = parse_source_options({**BASE, "headrace.remote.storage.kind": "filesystem",
                                  "headrace.remote.storage.path": "/srv/tier"},
                                 streaming=False)
    assert files.remote is not None and files.remote.path == Path("/srv/tier")
    assert parse_source_options(BASE, streaming=False).remote is None


@pytest.mark.parametrize(("extra", "streaming", "message"), [
    ({"headrace.remote.storage.path": "/x"}, False,
     "need 'headrace.remote.storage.kind'"),
    ({"headrace.remote.storage.kind": "s3"}, False,
     "'headrace.remote.storage.s3.endpoint' is required"),
    ({"headrace.remote.storage.kind": "filesystem"}, False,
     "headrace.remote.storage.path is required"),
    ({"headrace.remote.storage.kind": "gcs"}, False, "one of filesystem, s3"),
    ({"headrace.remote.storage.kind": "filesystem", "headrace.remote.storage.pth": "/x"},
     False, "unknown source option 'headrace.remote.storage.pth'"),
    ({"headrace.remote.storage.kind": "filesystem", "headrace.remote.storage.path": "/x"},
     True, "batch reads only"),
    ({"headrace.remote.storage.kind": "filesystem", "headrace.remote.storage.path": "/x",
      "kafka.security.protocol": "SSL"}, False, "PLAINTEXT only"),
])
def test_bad_store_settings(extra: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(OptionError, match=message) as info:
        parse_source_options({**BASE, **extra}, streaming=streaming)
    assert "\n" not in str(info.value)
