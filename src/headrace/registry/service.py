"""The registry's operations, as Confluent Schema Registry's REST API defines them.

Each method takes plain values (path parameters, query flags, the JSON body) and returns
the JSON body of the answer, or raises a ``RegistryError`` carrying Confluent's code.
Reads look at the folded state; writes go through ``SchemaStore.transact``, whose decision
functions here are pure (they may run again after a fencing). Blocking: writes wait for
the broker (up to the store's timeout); reads do not.
"""

from __future__ import annotations

from typing import Any

from headrace.registry import errors
from headrace.registry.formats import SCHEMA_TYPES, ParsedSchema, ResolvedReference, parse
from headrace.registry.state import (
    COMPATIBILITY_LEVELS,
    DEFAULT_COMPATIBILITY,
    DEFAULT_MODE,
    MODES,
    Record,
    Reference,
    SchemaVersion,
    State,
    config_record,
    id_high_water_record,
    mode_record,
    schema_record,
    schema_tombstone,
)
from headrace.registry.store import SchemaStore

Body = dict[str, Any]
_MAX_REFERENCE_DEPTH = 32


def parse_version(text: str | int) -> int | None:
    """A version path parameter: 1.. or ``latest``/-1 (None). Raises ``InvalidVersion``."""
    if text in ("latest", "-1", -1):
        return None
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1 or number > 2**31 - 1:
        raise errors.InvalidVersion(f"The specified version '{text}' is not a valid version "
                                    f"id. Allowed values are between [1, 2^31-1] and the "
                                    f"string \"latest\"")
    return number


class SchemaRequest:
    """A schema as posted: ``{"schema", "schemaType", "references", ["id", "version"]}``."""

    def __init__(self, body: object) -> None:
        if not isinstance(body, dict):
            raise errors.InvalidRequest("The request body must be a JSON object")
        text = body.get("schema")
        if not isinstance(text, str) or not text.strip():
            raise errors.InvalidSchema("Empty schema: the body needs a \"schema\" string")
        self.text: str = text
        schema_type = body.get("schemaType") or "AVRO"
        if schema_type not in SCHEMA_TYPES:
            raise errors.InvalidSchema(f"Invalid schema type {schema_type!r}; one of "
                                       f"{', '.join(SCHEMA_TYPES)}")
        self.schema_type: str = str(schema_type)
        refs = body.get("references") or []
        if not isinstance(refs, list):
            raise errors.InvalidSchema("\"references\" must be a list")
        try:
            self.references = tuple(Reference(str(r["name"]), str(r["subject"]),
                                              int(r.get("version", -1))) for r in refs)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise errors.InvalidSchema("Each reference needs name, subject and version") from e
        self.id = _optional_int(body, "id")
        self.version = _optional_int(body, "version")


def _optional_int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None or (key == "version" and value == -1):
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise errors.InvalidRequest(f"\"{key}\" must be a positive integer")
    return value


class RegistryService:
    """The REST API's operations on one ``SchemaStore`` (started by the caller)."""

    def __init__(self, store: SchemaStore) -> None:
        self.store = store

    # -- schema helpers ------------------------------------------------------------------

    def _resolve(self, state: State, refs: tuple[Reference, ...],
                 depth: int = 0) -> tuple[ResolvedReference, ...]:
        if depth > _MAX_REFERENCE_DEPTH:
            raise errors.InvalidSchema("References nest too deep (a cycle?)")
        resolved = []
        for ref in refs:
            live = state.versions(ref.subject, include_deleted=False)
            found = ([v for v in live if v.version == ref.version] if ref.version != -1
                     else live[-1:])
            if not found:
                raise errors.InvalidSchema(f"Invalid schema: reference {ref.name!r} to subject "
                                           f"{ref.subject!r} version {ref.version} not found")
            target = found[0]
            resolved.append(ResolvedReference(ref.name, target.schema_type, target.schema,
                                              self._resolve(state, target.references, depth + 1)))
        return tuple(resolved)

    def _parse(self, state: State, schema_type: str, text: str,
               refs: tuple[Reference, ...]) -> ParsedSchema:
        return parse(schema_type, text, self._resolve(state, refs))

    def _parse_version(self, state: State, v: SchemaVersion) -> ParsedSchema:
        return self._parse(state, v.schema_type, v.schema, v.references)

    def _served(self, state: State, v: SchemaVersion, fmt: str | None) -> str:
        """The schema text as served: as registered, except for a ``format`` and for
        Protobuf registered as a descriptor (served as ``.proto`` text)."""
        if fmt or v.schema_type == "PROTOBUF":
            return self._parse_version(state, v).render(fmt)
        return v.schema

    def _same(self, state: State, v: SchemaVersion, request: SchemaRequest, key: str,
              normalize: bool) -> bool:
        if v.schema_type != request.schema_type or v.references != request.references:
            return False
        if v.schema == request.text:
            return True
        try:
            return self._parse_version(state, v).canonical(normalize) == key
        except errors.RegistryError:
            return False

    def _live(self, state: State, subject: str, deleted: bool = False) -> list[SchemaVersion]:
        versions = state.versions(subject, include_deleted=deleted)
        if not versions:
            raise errors.SubjectNotFound(f"Subject '{subject}' not found.")
        return versions

    def _version(self, state: State, subject: str, version: str | int,
                 deleted: bool = False) -> SchemaVersion:
        number = parse_version(version)
        versions = self._live(state, subject, deleted)
        if number is None:
            live = [v for v in versions if not v.deleted] or versions
            return live[-1]
        for v in versions:
            if v.version == number:
                return v
        raise errors.VersionNotFound(f"Version {number} not found.")

    def compatibility_errors(self, state: State, level: str, new: ParsedSchema,
                             olds: list[SchemaVersion]) -> list[str]:
        """Why ``new`` may not follow ``olds`` (oldest first) under ``level``; [] if it may."""
        if level == "NONE" or not olds:
            return []
        targets = olds if level.endswith("_TRANSITIVE") else olds[-1:]
        found: list[str] = []
        for old in reversed(targets):
            parsed = self._parse_version(state, old)
            if parsed.schema_type != new.schema_type:
                found.append(f"version {old.version}: schema type changed from "
                             f"{parsed.schema_type} to {new.schema_type}")
                continue
            reasons = [f"after version {old.version}: {r}" for r in new.evolution_errors(parsed)]
            if level.startswith(("BACKWARD", "FULL")):
                reasons += [f"reading data of version {old.version}: {r}"
                            for r in new.compatibility_errors(parsed)]
            if level.startswith(("FORWARD", "FULL")):
                reasons += [f"version {old.version} reading new data: {r}"
                            for r in parsed.compatibility_errors(new)]
            found += reasons
        return found

    # -- subjects and versions -----------------------------------------------------------

    def list_subjects(self, deleted: bool = False, prefix: str = "") -> list[str]:
        with self.store.reading() as state:
            return sorted(s for s in state.subjects if s.startswith(prefix)
                          and state.versions(s, include_deleted=deleted))

    def list_versions(self, subject: str, deleted: bool = False) -> list[int]:
        with self.store.reading() as state:
            return [v.version for v in self._live(state, subject, deleted)]

    def get_version(self, subject: str, version: str, deleted: bool = False,
                    fmt: str | None = None) -> Body:
        with self.store.reading() as state:
            found = self._version(state, subject, version, deleted)
            body = found.to_json()
            body["schema"] = self._served(state, found, fmt)
            return body

    def referenced_by(self, subject: str, version: str) -> list[int]:
        with self.store.reading() as state:
            found = self._version(state, subject, version)
            return state.referenced_by(subject, found.version)

    def lookup(self, subject: str, body: object, normalize: bool = False,
               deleted: bool = False) -> Body:
        request = SchemaRequest(body)
        with self.store.reading() as state:
            versions = self._live(state, subject, deleted)
            parsed = self._parse(state, request.schema_type, request.text, request.references)
            key = parsed.canonical(normalize)
            for v in reversed(versions):
                if self._same(state, v, request, key, normalize):
                    return v.to_json()
        raise errors.SchemaNotFound("Schema not found")

    def register(self, subject: str, body: object, normalize: bool = False) -> Body:
        request = SchemaRequest(body)

        def decide(state: State) -> tuple[Body, list[Record]]:
            mode = state.mode(subject)
            if mode == "READONLY":
                raise errors.OperationNotPermitted(f"Subject {subject} is in read-only mode")
            if mode != "IMPORT" and request.id is not None:
                raise errors.OperationNotPermitted(
                    "A schema id can only be given in IMPORT mode")
            parsed = self._parse(state, request.schema_type, request.text, request.references)
            key = parsed.canonical(normalize)
            live = state.versions(subject, include_deleted=False)
            for v in live:
                if self._same(state, v, request, key, normalize) and (
                        request.id in (None, v.id)):
                    return v.to_json(), []
            if mode == "IMPORT":
                return self._import(state, subject, request, key, normalize)
            reasons = self.compatibility_errors(state, state.compatibility(subject), parsed, live)
            if reasons:
                raise errors.IncompatibleSchema(
                    f"Schema being registered is incompatible with an earlier schema for "
                    f"subject \"{subject}\", details: {reasons}")
            schema_id = self._existing_id(state, request, key, normalize)
            records: list[Record] = []
            if schema_id is None:
                schema_id = state.id_high_water + 1
                records.append(id_high_water_record(schema_id))
            everything = state.versions(subject, include_deleted=True)
            version = (everything[-1].version if everything else 0) + 1
            entry = SchemaVersion(subject, version, schema_id, request.text,
                                  request.schema_type, request.references)
            records.insert(0, schema_record(entry))
            return entry.to_json(), records

        return self.store.transact(decide)

    def _existing_id(self, state: State, request: SchemaRequest, key: str,
                     normalize: bool) -> int | None:
        for versions in state.subjects.values():
            for v in versions.values():
                if self._same(state, v, request, key, normalize):
                    return v.id
        return None

    def _import(self, state: State, subject: str, request: SchemaRequest, key: str,
                normalize: bool) -> tuple[Body, list[Record]]:
        if request.id is None:
            raise errors.OperationNotPermitted("IMPORT mode needs the schema's \"id\"")
        holders = state.by_id(request.id)
        if holders and not self._same(state, holders[0], request, key, normalize):
            raise errors.OperationNotPermitted(
                f"Overwrite new schema with id {request.id} is not permitted: "
                f"the id holds another schema")
        everything = state.versions(subject, include_deleted=True)
        version = request.version or (everything[-1].version if everything else 0) + 1
        if any(v.version == version for v in everything):
            raise errors.OperationNotPermitted(
                f"Version {version} of subject {subject} already exists")
        entry = SchemaVersion(subject, version, request.id, request.text,
                              request.schema_type, request.references)
        records = [schema_record(entry)]
        if request.id > state.id_high_water:
            records.append(id_high_water_record(request.id))
        return entry.to_json(), records

    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        def decide(state: State) -> tuple[list[int], list[Record]]:
            self._writable(state, subject)
            everything = state.versions(subject, include_deleted=True)
            live = [v for v in everything if not v.deleted]
            if not everything:
                raise errors.SubjectNotFound(f"Subject '{subject}' not found.")
            if not permanent:
                if not live:
                    raise errors.SubjectSoftDeleted(
                        f"Subject '{subject}' was soft deleted. Set permanent=true to delete "
                        f"permanently")
                self._not_referenced(state, live)
                return ([v.version for v in live],
                        [schema_record(_soft_deleted(v)) for v in live])
            if live:
                raise errors.SubjectNotSoftDeleted(
                    f"Subject '{subject}' was not deleted first before being permanently "
                    f"deleted")
            records = [schema_tombstone(subject, v.version) for v in everything]
            if subject in state.configs:
                records.append(config_record(subject, None))
            if subject in state.modes:
                records.append(mode_record(subject, None))
            return [v.version for v in everything], records

        return self.store.transact(decide)

    def delete_version(self, subject: str, version: str, permanent: bool = False) -> int:
        def decide(state: State) -> tuple[int, list[Record]]:
            self._writable(state, subject)
            found = self._version(state, subject, version, deleted=permanent)
            if not permanent:
                if found.deleted:
                    raise errors.VersionSoftDeleted(
                        f"Subject '{subject}' Version {found.version} was soft deleted. Set "
                        f"permanent=true to delete permanently")
                self._not_referenced(state, [found])
                return found.version, [schema_record(_soft_deleted(found))]
            if not found.deleted:
                raise errors.VersionNotSoftDeleted(
                    f"Subject '{subject}' Version {found.version} was not deleted first before "
                    f"being permanently deleted")
            return found.version, [schema_tombstone(subject, found.version)]

        return self.store.transact(decide)

    @staticmethod
    def _writable(state: State, subject: str) -> None:
        if state.mode(subject) == "READONLY":
            raise errors.OperationNotPermitted(f"Subject {subject} is in read-only mode")

    @staticmethod
    def _not_referenced(state: State, versions: list[SchemaVersion]) -> None:
        for v in versions:
            users = state.referenced_by(v.subject, v.version)
            if users:
                raise errors.ReferenceExists(
                    f"One or more references exist to the schema {{subject={v.subject}, "
                    f"version={v.version}}}: schema ids {users}")

    # -- schemas by id -------------------------------------------------------------------

    def schema_by_id(self, schema_id: int, fmt: str | None = None) -> Body:
        with self.store.reading() as state:
            holders = state.by_id(schema_id)
            if not holders:
                raise errors.SchemaNotFound(f"Schema {schema_id} not found")
            first = holders[0]
            body: Body = {"schema": self._served(state, first, fmt)}
            if first.schema_type != "AVRO":
                body["schemaType"] = first.schema_type
            if first.references:
                body["references"] = [r.to_json() for r in first.references]
            return body

    def id_versions(self, schema_id: int, deleted: bool = False) -> list[Body]:
        with self.store.reading() as state:
            holders = [v for v in state.by_id(schema_id) if deleted or not v.deleted]
            if not state.by_id(schema_id):
                raise errors.SchemaNotFound(f"Schema {schema_id} not found")
            return [{"subject": v.subject, "version": v.version}
                    for v in sorted(holders, key=lambda v: (v.subject, v.version))]

    def id_subjects(self, schema_id: int, deleted: bool = False) -> list[str]:
        return sorted({v["subject"] for v in self.id_versions(schema_id, deleted)})

    def list_schemas(self, prefix: str = "", deleted: bool = False,
                     latest_only: bool = False) -> list[Body]:
        with self.store.reading() as state:
            found: list[Body] = []
            for subject in sorted(state.subjects):
                if not subject.startswith(prefix):
                    continue
                versions = state.versions(subject, include_deleted=deleted)
                found += [v.to_json() for v in (versions[-1:] if latest_only else versions)]
            return found

    # -- compatibility -------------------------------------------------------------------

    def check(self, subject: str, version: str | None, body: object, normalize: bool = False,
              verbose: bool = False) -> Body:
        """``version`` None: against every version the level requires (all for transitive)."""
        request = SchemaRequest(body)
        with self.store.reading() as state:
            parsed = self._parse(state, request.schema_type, request.text, request.references)
            level = state.compatibility(subject)
            if version is None:
                reasons = self.compatibility_errors(
                    state, level, parsed, state.versions(subject, include_deleted=False))
            else:
                found = self._version(state, subject, version)
                single = level.removesuffix("_TRANSITIVE")
                reasons = self.compatibility_errors(state, single, parsed, [found])
        answer: Body = {"is_compatible": not reasons}
        if verbose:
            answer["messages"] = reasons
        return answer

    # -- config and mode ------------------------------------------------------------------

    def get_config(self, subject: str | None, default_to_global: bool = False) -> Body:
        with self.store.reading() as state:
            if subject is not None and subject not in state.configs and not default_to_global:
                raise errors.SubjectConfigNotFound(
                    f"Subject '{subject}' does not have subject-level compatibility configured")
            return {"compatibilityLevel": state.compatibility(subject)}

    def put_config(self, subject: str | None, body: object) -> Body:
        level = body.get("compatibility") if isinstance(body, dict) else None
        if not isinstance(level, str) or level.upper() not in COMPATIBILITY_LEVELS:
            raise errors.InvalidCompatibilityLevel(
                f"Invalid compatibility level. Valid values are {', '.join(COMPATIBILITY_LEVELS)}")
        chosen = level.upper()
        return self.store.transact(
            lambda _state: ({"compatibility": chosen}, [config_record(subject, chosen)]))

    def delete_config(self, subject: str | None) -> Body:
        def decide(state: State) -> tuple[Body, list[Record]]:
            if subject is not None and subject not in state.configs:
                raise errors.SubjectConfigNotFound(
                    f"Subject '{subject}' does not have subject-level compatibility configured")
            previous = state.configs.get(subject, DEFAULT_COMPATIBILITY)
            records = [config_record(subject, None)] if subject in state.configs else []
            return {"compatibilityLevel": previous}, records

        return self.store.transact(decide)

    def get_mode(self, subject: str | None, default_to_global: bool = False) -> Body:
        with self.store.reading() as state:
            if subject is not None and subject not in state.modes and not default_to_global:
                raise errors.SubjectModeNotFound(
                    f"Subject '{subject}' does not have subject-level mode configured")
            return {"mode": state.mode(subject)}

    def put_mode(self, subject: str | None, body: object, force: bool = False) -> Body:
        mode = body.get("mode") if isinstance(body, dict) else None
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise errors.InvalidMode(f"Invalid mode. Valid values are {', '.join(MODES)}")
        chosen = mode.upper()

        def decide(state: State) -> tuple[Body, list[Record]]:
            if chosen == "IMPORT" and not force:
                holders = ([subject] if subject is not None else list(state.subjects))
                if any(state.versions(s, include_deleted=True) for s in holders):
                    raise errors.OperationNotPermitted(
                        "Cannot import since found existing subjects (use force=true)")
            return {"mode": chosen}, [mode_record(subject, chosen)]

        return self.store.transact(decide)

    def delete_mode(self, subject: str | None) -> Body:
        def decide(state: State) -> tuple[Body, list[Record]]:
            if subject is not None and subject not in state.modes:
                raise errors.SubjectModeNotFound(
                    f"Subject '{subject}' does not have subject-level mode configured")
            previous = state.modes.get(subject, DEFAULT_MODE)
            records = [mode_record(subject, None)] if subject in state.modes else []
            return {"mode": previous}, records

        return self.store.transact(decide)


def _soft_deleted(v: SchemaVersion) -> SchemaVersion:
    return SchemaVersion(v.subject, v.version, v.id, v.schema, v.schema_type, v.references,
                         deleted=True)

