"""Schema texts shared by the registry tests."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any


def avro_record(name: str, *fields: dict[str, Any], **extra: Any) -> str:
    return json.dumps({"type": "record", "name": name, "fields": list(fields), **extra})


def field(name: str, kind: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, **extra}


USER_V1 = avro_record("User", field("id", "long"), field("name", "string"))
USER_V2 = avro_record("User", field("id", "long"), field("name", "string"),
                      field("email", ["null", "string"], default=None))
USER_BREAKING = avro_record("User", field("id", "string"), field("name", "string"))


def compile_proto(tmp: Path, name: str, text: str) -> ModuleType:
    """Write ``name``.proto, generate its Python module with protoc, import it."""
    (tmp / f"{name}.proto").write_text(text)
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp}", f"--python_out={tmp}",
                    f"{name}.proto"], check=True, cwd=tmp)
    sys.path.insert(0, str(tmp))
    try:
        return importlib.import_module(f"{name}_pb2")
    finally:
        sys.path.remove(str(tmp))
