"""Values in a schema registry's wire format: decoded in read tasks, encoded by the sink.

Confluent's serializers write a magic byte 0, the schema id (4 bytes, big-endian), then the
payload: Avro binary, JSON text, or (Protobuf) the message's index path followed by its
binary form. ``RegistryValueDecoder`` fetches each writer schema once per task over the
registry's REST API (any Confluent-compatible registry) and turns a value into a Python
document that ``headrace.spark.events`` then projects onto the query's schema: fields
the query does not name are dropped, fields it names but the writer lacked are null.

A value that is not in the wire format, names an unknown schema id, or does not decode is
``Invalid`` (a dead letter); a registry that cannot be reached is not the record's fault,
so it raises ``SparkConnectorError`` and the task fails (Spark retries it).

The sink (option ``schemaRegistryUrl``) writes a struct ``value`` column as Avro: the
driver derives the Avro schema from the struct (``avro_schema_of``, as Spark's
``to_avro`` maps types), registers it under ``<topic>-value`` when the query starts (an
incompatible change fails the start, with the registry's reasons), and tasks encode each
row with that schema id (``AvroValueEncoder``).
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampType,
)

from headrace.spark.errors import Invalid, OptionError, SparkConnectorError

if TYPE_CHECKING:
    import httpx

# httpx is imported by the functions that talk to the registry: every read task and sink
# task imports this module, and only those of a query with a registry need the client.

Decode = Callable[[bytes], Any]


class RegistryValueDecoder:
    """Decodes wire-format values with schemas from the registry at ``url``. Not thread-safe;
    one per read task. Blocks on the first value of each schema id (one HTTP request)."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._decoders: dict[int, Decode | Invalid] = {}
        self._http: httpx.Client | None = None

    def decode(self, value: bytes) -> Any:
        if len(value) < 5 or value[0] != 0:
            raise Invalid("not in the schema registry's wire format (magic byte 0, then a "
                          "4-byte schema id)")
        schema_id = int.from_bytes(value[1:5], "big")
        found = self._decoders.get(schema_id)
        if found is None:
            try:
                found = self._build(schema_id)
            except Invalid as e:
                found = e
            self._decoders[schema_id] = found
        if isinstance(found, Invalid):
            raise found
        return found(value[5:])

    def close(self) -> None:
        if self._http is not None:
            self._http.close()

    def _get(self, path: str, **params: str) -> Any:
        import httpx

        if self._http is None:
            self._http = httpx.Client(timeout=self.timeout)
        try:
            answer = self._http.get(self.url + path, params=params)
        except httpx.HTTPError as e:
            raise SparkConnectorError(f"schema registry {self.url} unreachable: {e}") from e
        if answer.status_code == 404:
            return None
        if answer.status_code >= 400:
            raise SparkConnectorError(f"schema registry {self.url} answered "
                                      f"{answer.status_code} to {path}: {answer.text[:200]}")
        return answer.json()

    def _build(self, schema_id: int) -> Decode:
        found = self._get(f"/schemas/ids/{schema_id}", format="serialized")
        if found is None:
            raise Invalid(f"unknown schema id {schema_id}")
        kind = found.get("schemaType", "AVRO")
        references = found.get("references") or []
        if kind == "JSON":
            return _decode_json
        if kind == "PROTOBUF":
            return self._protobuf(schema_id, found["schema"], references)
        return self._avro(found["schema"], references)

    def _reference(self, ref: dict[str, Any]) -> dict[str, Any]:
        found = self._get(f"/subjects/{ref['subject']}/versions/{ref['version']}",
                          format="serialized")
        if found is None:
            raise Invalid(f"schema reference {ref['name']!r} ({ref['subject']} version "
                          f"{ref['version']}) not found")
        return dict(found)

    def _avro(self, text: str, references: list[dict[str, Any]]) -> Decode:
        import fastavro

        named: dict[str, Any] = {}

        def load(refs: list[dict[str, Any]]) -> None:
            for ref in refs:
                found = self._reference(ref)
                load(found.get("references") or [])
                fastavro.parse_schema(json.loads(found["schema"]), named_schemas=named)

        load(references)
        writer = fastavro.parse_schema(json.loads(text), named_schemas=named)

        def decode(payload: bytes) -> Any:
            try:
                return fastavro.schemaless_reader(io.BytesIO(payload), writer, None)
            except (EOFError, ValueError, IndexError, TypeError, UnicodeDecodeError) as e:
                raise Invalid(f"undecodable Avro payload: {e or type(e).__name__}") from None

        return decode

    def _protobuf(self, schema_id: int, text: str, references: list[dict[str, Any]]) -> Decode:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
        from google.protobuf.message import DecodeError

        pool = descriptor_pool.DescriptorPool()
        _add_well_known(pool)
        added: set[str] = set()

        def add(name: str, serialized: str, refs: list[dict[str, Any]]) -> None:
            for ref in refs:
                if ref["name"] not in added:
                    found = self._reference(ref)
                    add(ref["name"], found["schema"], found.get("references") or [])
            proto = descriptor_pb2.FileDescriptorProto()
            proto.ParseFromString(base64.b64decode(serialized))
            proto.name = name
            pool.Add(proto)
            added.add(name)

        main = f"headrace_schema_{schema_id}.proto"
        add(main, text, references)
        file = pool.FindFileByName(main)

        def decode(payload: bytes) -> Any:
            try:
                path, rest = _message_indexes(payload)
                descriptor = file.message_types_by_name[list(file.message_types_by_name)[path[0]]]
                for index in path[1:]:
                    descriptor = descriptor.nested_types[index]
                message = message_factory.GetMessageClass(descriptor)()
                message.ParseFromString(rest)
            except (DecodeError, IndexError, ValueError) as e:
                raise Invalid(f"undecodable Protobuf payload: {e or type(e).__name__}") \
                    from None
            return _message_dict(message)

        return decode


def _decode_json(payload: bytes) -> Any:
    try:
        return json.loads(payload)
    except ValueError as e:
        raise Invalid(f"not JSON: {e}") from None


def _add_well_known(pool: Any) -> None:
    from google.protobuf import (
        any_pb2,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        struct_pb2,
        timestamp_pb2,
        wrappers_pb2,
    )

    for module in (any_pb2, duration_pb2, empty_pb2, field_mask_pb2, struct_pb2,
                   timestamp_pb2, wrappers_pb2):
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated message index")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos  # zigzag, as Confluent writes them
        shift += 7


def _message_indexes(payload: bytes) -> tuple[list[int], bytes]:
    count, pos = _varint(payload, 0)
    if count == 0:
        return [0], payload[pos:]
    if count < 0 or count > 100:
        raise ValueError(f"bad message index count {count}")
    path = []
    for _ in range(count):
        index, pos = _varint(payload, pos)
        path.append(index)
    return path, payload[pos:]


def _message_dict(message: Any) -> dict[str, Any]:
    """A message as a document: field names as declared, int64 as ints, enums by name,
    Timestamps as datetimes; unset singular message fields are null."""
    out: dict[str, Any] = {}
    for f in message.DESCRIPTOR.fields:
        value = getattr(message, f.name)
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            out[f.name] = {k: _value(f.message_type.fields_by_name["value"], v)
                           for k, v in value.items()}
        elif _is_repeated(f):
            out[f.name] = [_value(f, v) for v in value]
        elif f.message_type is not None and not message.HasField(f.name):
            out[f.name] = None
        else:
            out[f.name] = _value(f, value)
    return out


def _is_repeated(f: Any) -> bool:
    repeated = getattr(f, "is_repeated", None)
    return bool(repeated) if repeated is not None else bool(f.label == f.LABEL_REPEATED)


def _value(f: Any, value: Any) -> Any:
    if f.message_type is not None:
        if f.message_type.full_name == "google.protobuf.Timestamp":
            return dt.datetime.fromtimestamp(value.seconds + value.nanos / 1e9, tz=dt.UTC)
        return _message_dict(value)
    if f.enum_type is not None:
        named = f.enum_type.values_by_number.get(value)
        return named.name if named is not None else value
    return value


# -- the write side: struct values encoded as Avro under a registered schema ------------------


def avro_schema_of(struct: StructType, name: str = "topLevelRecord",
                   namespace: str = "headrace.spark") -> dict[str, Any]:
    """The Avro record for a Spark struct, as Spark's ``to_avro`` maps types: nullable
    fields become ``["null", T]`` with default null; timestamps ``timestamp-micros``,
    dates ``date``, decimals ``decimal`` bytes; nested structs are records named after
    their path. Raises ``OptionError`` for a type Avro can't carry (map keys not strings)."""
    return _avro_record(struct, name, namespace)


def _avro_record(struct: StructType, name: str, namespace: str) -> dict[str, Any]:
    fields = []
    for f in struct.fields:
        kind = _avro_type(f.dataType, f"{name}_{f.name}", namespace)
        if f.nullable:
            fields.append({"name": f.name, "type": ["null", kind], "default": None})
        else:
            fields.append({"name": f.name, "type": kind})
    return {"type": "record", "name": name, "namespace": namespace, "fields": fields}


def _avro_type(kind: DataType, name: str, namespace: str) -> Any:
    simple: dict[type, Any] = {
        StringType: "string", BinaryType: "bytes", BooleanType: "boolean", LongType: "long",
        IntegerType: "int", ShortType: "int", ByteType: "int", DoubleType: "double",
        FloatType: "float", TimestampType: {"type": "long", "logicalType": "timestamp-micros"},
        DateType: {"type": "int", "logicalType": "date"}}
    if type(kind) in simple:
        return simple[type(kind)]
    if isinstance(kind, DecimalType):
        return {"type": "bytes", "logicalType": "decimal", "precision": kind.precision,
                "scale": kind.scale}
    if isinstance(kind, ArrayType):
        items = _avro_type(kind.elementType, name, namespace)
        return {"type": "array", "items": ["null", items] if kind.containsNull else items}
    if isinstance(kind, MapType):
        if not isinstance(kind.keyType, StringType):
            raise OptionError(f"Avro maps have string keys, not {kind.keyType.simpleString()}")
        values = _avro_type(kind.valueType, name, namespace)
        return {"type": "map",
                "values": ["null", values] if kind.valueContainsNull else values}
    if isinstance(kind, StructType):
        return _avro_record(kind, name, namespace)
    raise OptionError(f"a {kind.simpleString()} column can't be written as Avro")


def register_schema(url: str, subject: str, schema: str) -> int:
    """Register an Avro ``schema`` under ``subject`` (idempotent) and return its id. Driver
    side, at query start: an incompatible schema (409) is an ``OptionError`` then, not a
    failure in the middle of a stream."""
    import httpx

    try:
        answer = httpx.post(f"{url.rstrip('/')}/subjects/{subject}/versions",
                            json={"schema": schema}, timeout=30)
    except httpx.HTTPError as e:
        raise SparkConnectorError(f"schema registry {url} unreachable: {e}") from e
    if answer.status_code >= 400:
        raise OptionError(f"schema registry refused the value schema for {subject!r}: "
                          f"{answer.text[:500]}")
    return int(answer.json()["id"])


class AvroValueEncoder:
    """Encodes a struct value (a dict from Arrow) as schema ``schema_id``'s wire format."""

    def __init__(self, schema: str, schema_id: int) -> None:
        import fastavro

        self._write = fastavro.schemaless_writer
        self._parsed = fastavro.parse_schema(json.loads(schema))
        self._header = b"\x00" + schema_id.to_bytes(4, "big")
        self._maps = _has_maps(json.loads(schema))

    def encode(self, value: dict[str, Any] | None) -> bytes | None:
        if value is None:
            return None
        out = io.BytesIO()
        out.write(self._header)
        self._write(out, self._parsed, _dict_maps(value) if self._maps else value)
        return out.getvalue()


def _has_maps(schema: Any) -> bool:
    """Whether a schema holds maps (Arrow hands them over as lists of pairs)."""
    return '"map"' in json.dumps(schema)


def _dict_maps(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _dict_maps(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {k: _dict_maps(v) for k, v in value}
        return [_dict_maps(v) for v in value]
    return value
