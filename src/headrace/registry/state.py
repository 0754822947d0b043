"""The registry's state: a fold of the ``_schemas`` topic, and the decisions taken on it.

Records use Confluent Schema Registry's layout, so the topic reads the same to its tools:
keys are JSON objects with a ``keytype``:

- ``SCHEMA`` ``{subject, version}`` -> ``{subject, version, id, schema, schemaType,
  references, deleted}``; a null value is a permanent delete of that version.
- ``CONFIG`` ``{subject|null}`` -> ``{compatibilityLevel}``; null removes it.
- ``MODE`` ``{subject|null}`` -> ``{mode}``; null removes it.
- ``ID_HIGH_WATER`` -> ``{id}``: the largest id ever handed out. Written with each new id,
  so ids are never reused even after every schema holding the largest id was
  permanently deleted and compacted away (the "ids reset" failure of other registries).

``State`` is not thread-safe on its own: the store applies records and the service reads
under one lock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

COMPATIBILITY_LEVELS = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE",
                        "FULL", "FULL_TRANSITIVE", "NONE")
MODES = ("READWRITE", "READONLY", "IMPORT")
DEFAULT_COMPATIBILITY = "BACKWARD"
DEFAULT_MODE = "READWRITE"


@dataclass(frozen=True)
class Reference:
    """A schema's reference to a version of another subject, under the name it uses."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class SchemaVersion:
    """One version of a subject. ``deleted`` means soft-deleted."""

    subject: str
    version: int
    id: int
    schema: str
    schema_type: str
    references: tuple[Reference, ...] = ()
    deleted: bool = False

    def to_json(self) -> dict[str, Any]:
        """The REST representation (Confluent omits schemaType for Avro, references when none)."""
        body: dict[str, Any] = {"subject": self.subject, "version": self.version,
                                "id": self.id, "schema": self.schema}
        if self.schema_type != "AVRO":
            body["schemaType"] = self.schema_type
        if self.references:
            body["references"] = [r.to_json() for r in self.references]
        return body


Record = tuple[bytes, bytes | None]


def schema_record(v: SchemaVersion) -> Record:
    key = {"keytype": "SCHEMA", "subject": v.subject, "version": v.version, "magic": 1}
    value = {"subject": v.subject, "version": v.version, "id": v.id, "schema": v.schema,
             "schemaType": v.schema_type, "deleted": v.deleted,
             "references": [r.to_json() for r in v.references]}
    return _dump(key), _dump(value)


def schema_tombstone(subject: str, version: int) -> Record:
    return _dump({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}), None


def config_record(subject: str | None, level: str | None) -> Record:
    key = _dump({"keytype": "CONFIG", "subject": subject, "magic": 0})
    return key, None if level is None else _dump({"compatibilityLevel": level})


def mode_record(subject: str | None, mode: str | None) -> Record:
    key = _dump({"keytype": "MODE", "subject": subject, "magic": 0})
    return key, None if mode is None else _dump({"mode": mode})


def id_high_water_record(schema_id: int) -> Record:
    return _dump({"keytype": "ID_HIGH_WATER", "magic": 0}), _dump({"id": schema_id})


def _dump(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


@dataclass
class State:
    """Everything the registry knows, as of ``next_offset`` of ``_schemas``."""

    subjects: dict[str, dict[int, SchemaVersion]] = field(default_factory=dict)
    configs: dict[str | None, str] = field(default_factory=dict)
    modes: dict[str | None, str] = field(default_factory=dict)
    id_high_water: int = 0
    holders: dict[int, set[tuple[str, int]]] = field(default_factory=dict)
    """Schema id -> the (subject, version)s carrying it (soft-deleted ones included)."""
    next_offset: int = 0
    skipped: int = 0

    def apply(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        """Fold one record. Records that are not ours (or are malformed) are counted in
        ``skipped`` and otherwise ignored: the topic may be shared with other tools."""
        self.next_offset = offset + 1
        try:
            k = json.loads(key) if key else None
            v = json.loads(value) if value else None
        except (ValueError, UnicodeDecodeError):
            self.skipped += 1
            return
        if not isinstance(k, dict) or (v is not None and not isinstance(v, dict)):
            self.skipped += 1
            return
        try:
            self._apply(k, v)
        except (KeyError, TypeError, ValueError):
            self.skipped += 1

    def _apply(self, k: dict[str, Any], v: dict[str, Any] | None) -> None:
        keytype = k.get("keytype")
        if keytype == "SCHEMA":
            subject, version = str(k["subject"]), int(k["version"])
            if v is None:
                self._forget(subject, version)
                return
            refs = tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"]))
                         for r in v.get("references") or [])
            entry = SchemaVersion(subject, version, int(v["id"]), str(v["schema"]),
                                  str(v.get("schemaType") or "AVRO"), refs,
                                  bool(v.get("deleted", False)))
            self._forget(subject, version)
            self.subjects.setdefault(subject, {})[version] = entry
            self.holders.setdefault(entry.id, set()).add((subject, version))
            self.id_high_water = max(self.id_high_water, entry.id)
        elif keytype == "CONFIG":
            self._set(self.configs, k.get("subject"), v and v.get("compatibilityLevel"))
        elif keytype == "MODE":
            self._set(self.modes, k.get("subject"), v and v.get("mode"))
        elif keytype == "ID_HIGH_WATER" and v is not None:
            self.id_high_water = max(self.id_high_water, int(v["id"]))

    def _forget(self, subject: str, version: int) -> None:
        versions = self.subjects.get(subject, {})
        old = versions.pop(version, None)
        if not versions:
            self.subjects.pop(subject, None)
        if old is not None:
            holders = self.holders.get(old.id, set())
            holders.discard((subject, version))
            if not holders:
                self.holders.pop(old.id, None)

    @staticmethod
    def _set(table: dict[str | None, str], subject: Any, value: Any) -> None:
        if value is None:
            table.pop(subject, None)
        else:
            table[None if subject is None else str(subject)] = str(value)

    # -- queries ----------------------------------------------------------------------

    def versions(self, subject: str, include_deleted: bool) -> list[SchemaVersion]:
        """The subject's versions in order (soft-deleted ones only when asked)."""
        found = self.subjects.get(subject, {})
        return [found[n] for n in sorted(found) if include_deleted or not found[n].deleted]

    def by_id(self, schema_id: int) -> list[SchemaVersion]:
        """Every version (soft-deleted included) that carries ``schema_id``."""
        return [self.subjects[s][n] for s, n in sorted(self.holders.get(schema_id, ()))]

    def compatibility(self, subject: str | None) -> str:
        if subject is not None and subject in self.configs:
            return self.configs[subject]
        return self.configs.get(None, DEFAULT_COMPATIBILITY)

    def mode(self, subject: str | None) -> str:
        if subject is not None and subject in self.modes:
            return self.modes[subject]
        return self.modes.get(None, DEFAULT_MODE)

    def referenced_by(self, subject: str, version: int) -> list[int]:
        """Ids of live schemas that reference (subject, version)."""
        return sorted({v.id for versions in self.subjects.values() for v in versions.values()
                       if not v.deleted and any(r.subject == subject and r.version == version
                                                for r in v.references)})
