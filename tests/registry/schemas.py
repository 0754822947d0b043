"""Schema texts shared by the registry tests."""

from __future__ import annotations

import json
from typing import Any


def avro_record(name: str, *fields: dict[str, Any], **extra: Any) -> str:
    return json.dumps({"type": "record", "name": name, "fields": list(fields), **extra})


def field(name: str, kind: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, **extra}


USER_V1 = avro_record("User", field("id", "long"), field("name", "string"))
USER_V2 = avro_record("User", field("id", "long"), field("name", "string"),
                      field("email", ["null", "string"], default=None))
USER_BREAKING = avro_record("User", field("id", "string"), field("name", "string"))
