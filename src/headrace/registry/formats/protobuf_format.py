"""Protobuf schemas: compiled by ``protoc`` (grpcio-tools), judged at the wire level.

A schema arrives as ``.proto`` text or, as Confluent's serializers send it, a base64
``FileDescriptorProto``. Either way it becomes a ``FileDescriptorProto`` checked by
protobuf's own ``DescriptorPool`` with its references (imports, by reference name) and the
well-known types, so an unresolved type or import is a 42201, never a silent pass. Text is
compiled by ``protoc`` in a subprocess (its errors are captured whole); the references go
in as a descriptor set, so a reference registered in either form can be imported.

The identity key is the descriptor without its file name or JSON names, serialized
deterministically: the text and base64 forms of one schema get one id. A schema registered
as a descriptor is served as ``.proto`` text printed from it (``to_text``), as Confluent's
registry does.

Compatibility (reader can parse what the writer wrote) follows the wire, by field number,
as Confluent's rules do: fields may be added or removed; a number kept must keep a
wire-compatible type (varint: int32/uint32/int64/uint64/bool/enum; zigzag: sint32/sint64;
fixed32/sfixed32; fixed64/sfixed64; length-delimited: string/bytes, and messages only
with the same type); singular/repeated may change only for length-delimited types; proto2
``required`` fields may be neither added nor removed; a field may not leave a oneof, join a
oneof that existed, or join a new oneof together with other existing fields; a message may
not disappear and the package may not change. One rule depends on age, whichever way data
flows (``evolution_errors``): a new version may not use a number the previous one reserved
(reuse of a retired number is how readers misparse old data).
"""

from __future__ import annotations

import base64
import binascii
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor_pb2 import FieldDescriptorProto as FieldProto
from google.protobuf.descriptor_pb2 import FileDescriptorProto as FDP
from google.protobuf.message import DecodeError

from headrace.registry.errors import InvalidSchema
from headrace.registry.formats.references import ResolvedReference, dependencies_first

_WIRE_GROUPS: dict[int, str] = {
    **dict.fromkeys((FieldProto.TYPE_INT32, FieldProto.TYPE_UINT32, FieldProto.TYPE_INT64,
                     FieldProto.TYPE_UINT64, FieldProto.TYPE_BOOL, FieldProto.TYPE_ENUM),
                    "varint"),
    **dict.fromkeys((FieldProto.TYPE_SINT32, FieldProto.TYPE_SINT64), "zigzag"),
    **dict.fromkeys((FieldProto.TYPE_FIXED32, FieldProto.TYPE_SFIXED32), "fixed32"),
    **dict.fromkeys((FieldProto.TYPE_FIXED64, FieldProto.TYPE_SFIXED64), "fixed64"),
    **dict.fromkeys((FieldProto.TYPE_STRING, FieldProto.TYPE_BYTES), "bytes"),
    FieldProto.TYPE_MESSAGE: "message",
    FieldProto.TYPE_FLOAT: "float",
    FieldProto.TYPE_DOUBLE: "double",
    FieldProto.TYPE_GROUP: "group",
}
_LENGTH_DELIMITED = {"bytes", "message"}
_MAIN = "__schema__.proto"


@dataclass(frozen=True)
class ProtobufSchema:
    """A parsed Protobuf schema: ``text`` as registered, ``descriptor`` its FileDescriptorProto."""

    text: str
    descriptor: bytes = field(compare=False)
    from_descriptor: bool = False
    """Registered as a base64 descriptor: served as ``.proto`` text, as Confluent does."""
    schema_type: str = "PROTOBUF"

    def file(self) -> FDP:
        proto = FDP()
        proto.ParseFromString(self.descriptor)
        return proto

    def canonical(self, normalize: bool) -> str:
        proto = self.file()
        proto.ClearField("name")
        proto.ClearField("source_code_info")
        for message in _messages(proto).values():
            for f in message.field:
                f.ClearField("json_name")
        return base64.b64encode(proto.SerializeToString(deterministic=True)).decode()

    def render(self, fmt: str | None) -> str:
        if fmt == "serialized":
            return base64.b64encode(self.descriptor).decode()
        if self.from_descriptor:
            return to_text(self.file())
        return self.text

    def compatibility_errors(self, writer: object) -> list[str]:
        assert isinstance(writer, ProtobufSchema)
        return _compare_files(self.file(), writer.file())

    def evolution_errors(self, previous: object) -> list[str]:
        """A field numbered as one ``previous`` reserved: the number was retired because
        old data holds it with another meaning. (Reserving a removed number is fine.)"""
        assert isinstance(previous, ProtobufSchema)
        before = _messages(previous.file())
        errors: list[str] = []
        for name, message in _messages(self.file()).items():
            old = before.get(name)
            if old is None:
                continue
            errors += [f"{name}.{f.name} (#{f.number}): uses a field number the previous "
                       f"version reserved" for f in message.field if _reserved(old, f.number)]
        return errors


def parse(text: str, references: tuple[ResolvedReference, ...]) -> ProtobufSchema:
    deps = [(ref.name, _descriptor_of(ref.schema, ref.name, ())) for ref in
            dependencies_first(references)]
    proto = _descriptor_of(text, _MAIN, tuple(deps))
    return ProtobufSchema(text=text, descriptor=proto.SerializeToString(deterministic=True),
                          from_descriptor=_from_base64(text) is not None)


def _descriptor_of(text: str, name: str, deps: tuple[tuple[str, FDP], ...]) -> FDP:
    proto = _from_base64(text)
    if proto is None:
        proto = _compile(text, deps)
    proto.name = name
    pool = descriptor_pool.DescriptorPool()
    _add_well_known(pool)
    try:
        for dep_name, dep in deps:
            dep_copy = FDP()
            dep_copy.CopyFrom(dep)
            dep_copy.name = dep_name
            pool.Add(dep_copy)
        pool.Add(proto)
        pool.FindFileByName(name)
    except (TypeError, KeyError, ValueError) as e:
        raise InvalidSchema(f"Invalid Protobuf schema: {e}") from e
    return proto


def _from_base64(text: str) -> FDP | None:
    stripped = text.strip()
    if not stripped or any(c in stripped for c in " ;{}\n\t"):
        return None
    try:
        raw = base64.b64decode(stripped, validate=True)
        proto = FDP()
        proto.ParseFromString(raw)
    except (binascii.Error, ValueError, DecodeError):
        return None
    return proto


def _compile(text: str, deps: tuple[tuple[str, FDP], ...]) -> FDP:
    """Run protoc on ``text`` with ``deps`` as a descriptor set. Blocks (tens of ms)."""
    import grpc_tools

    include = Path(grpc_tools.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory(prefix="headrace-proto-") as tmp:
        root = Path(tmp)
        (root / _MAIN).write_text(text)
        args = [sys.executable, "-m", "grpc_tools.protoc", f"-I{root}", f"-I{include}",
                f"--descriptor_set_out={root / 'out.pb'}"]
        if deps:
            deps_set = descriptor_pb2.FileDescriptorSet()
            for dep_name, dep in deps:
                entry = deps_set.file.add()
                entry.CopyFrom(dep)
                entry.name = dep_name
            (root / "deps.pb").write_bytes(deps_set.SerializeToString())
            args.append(f"--descriptor_set_in={root / 'deps.pb'}")
        args.append(_MAIN)
        done = subprocess.run(args, cwd=root, capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONWARNINGS": "ignore"}, check=False)
        if done.returncode != 0:
            detail = (done.stderr.strip().replace(f"{root}/", "")
                      .replace(f"{_MAIN}:", "line "))
            raise InvalidSchema(f"Invalid Protobuf schema: {detail}")
        out = descriptor_pb2.FileDescriptorSet()
        out.ParseFromString((root / "out.pb").read_bytes())
    return out.file[-1]


def _add_well_known(pool: descriptor_pool.DescriptorPool) -> None:
    from google.protobuf import (
        any_pb2,
        api_pb2,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        source_context_pb2,
        struct_pb2,
        timestamp_pb2,
        type_pb2,
        wrappers_pb2,
    )

    for module in (any_pb2, source_context_pb2, type_pb2, api_pb2, descriptor_pb2,
                   duration_pb2, empty_pb2, field_mask_pb2, struct_pb2, timestamp_pb2,
                   wrappers_pb2):
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)


def _messages(proto: FDP) -> dict[str, descriptor_pb2.DescriptorProto]:
    """Every message of the file by full name (nested ones included, map entries too)."""
    found: dict[str, descriptor_pb2.DescriptorProto] = {}
    prefix = f".{proto.package}" if proto.package else ""

    def walk(message: descriptor_pb2.DescriptorProto, scope: str) -> None:
        name = f"{scope}.{message.name}"
        found[name] = message
        for nested in message.nested_type:
            walk(nested, name)

    for message in proto.message_type:
        walk(message, prefix)
    return found


def _reserved(message: descriptor_pb2.DescriptorProto, number: int) -> bool:
    return any(r.start <= number < r.end for r in message.reserved_range)


def _compare_files(reader: FDP, writer: FDP) -> list[str]:
    errors: list[str] = []
    if reader.package != writer.package:
        errors.append(f"package changed from {writer.package!r} to {reader.package!r}")
        return errors
    r_messages = _messages(reader)
    for name, w_message in _messages(writer).items():
        r_message = r_messages.get(name)
        if r_message is None:
            errors.append(f"{name}: message removed")
            continue
        errors.extend(_compare_messages(name, r_message, w_message))
    return errors


def _compare_messages(name: str, reader: descriptor_pb2.DescriptorProto,
                      writer: descriptor_pb2.DescriptorProto) -> list[str]:
    errors: list[str] = []
    r_fields = {f.number: f for f in reader.field}
    w_fields = {f.number: f for f in writer.field}

    def oneof(message: descriptor_pb2.DescriptorProto, f: FieldProto) -> str | None:
        if not f.HasField("oneof_index") or f.proto3_optional:
            return None
        return str(message.oneof_decl[f.oneof_index].name)

    w_oneofs = {oneof(writer, f) for f in writer.field} - {None}
    moved_into: dict[str, int] = {}
    for number, w_field in w_fields.items():
        where = f"{name}.{w_field.name} (#{number})"
        r_field = r_fields.get(number)
        if r_field is None:
            if oneof(writer, w_field) is not None:
                errors.append(f"{where}: field removed from oneof {oneof(writer, w_field)}")
            if w_field.label == FieldProto.LABEL_REQUIRED:
                errors.append(f"{where}: required field removed")
            continue
        errors.extend(_compare_fields(where, r_field, w_field))
        r_oneof, w_oneof = oneof(reader, r_field), oneof(writer, w_field)
        if w_oneof is not None and r_oneof is None:
            errors.append(f"{where}: field moved out of oneof {w_oneof}")
        elif r_oneof is not None and w_oneof is None:
            if r_oneof in w_oneofs:
                errors.append(f"{where}: field moved into existing oneof {r_oneof}")
            moved_into[r_oneof] = moved_into.get(r_oneof, 0) + 1
    for group, count in moved_into.items():
        if count > 1:
            errors.append(f"{name}: {count} existing fields moved into oneof {group}")
    for number, r_field in r_fields.items():
        where = f"{name}.{r_field.name} (#{number})"
        if number in w_fields:
            continue
        if r_field.label == FieldProto.LABEL_REQUIRED:
            errors.append(f"{where}: required field added")
    return errors


def _compare_fields(where: str, reader: FieldProto, writer: FieldProto) -> list[str]:
    errors: list[str] = []
    r_group, w_group = _WIRE_GROUPS.get(reader.type), _WIRE_GROUPS.get(writer.type)
    if r_group != w_group:
        errors.append(f"{where}: type changed from {_type_name(writer)} to {_type_name(reader)} "
                      f"(not wire-compatible)")
    elif r_group == "message" and reader.type_name != writer.type_name:
        errors.append(f"{where}: message type changed from {writer.type_name} "
                      f"to {reader.type_name}")
    r_repeated = reader.label == FieldProto.LABEL_REPEATED
    w_repeated = writer.label == FieldProto.LABEL_REPEATED
    if r_repeated != w_repeated and not (r_group == w_group and r_group in _LENGTH_DELIMITED):
        errors.append(f"{where}: changed between singular and repeated")
    if reader.label == FieldProto.LABEL_REQUIRED and writer.label != FieldProto.LABEL_REQUIRED:
        errors.append(f"{where}: became required")
    return errors


def _type_name(f: FieldProto) -> str:
    if f.type in (FieldProto.TYPE_MESSAGE, FieldProto.TYPE_ENUM):
        return str(f.type_name)
    return str(FieldProto.Type.Name(f.type)).removeprefix("TYPE_").lower()


# -- FileDescriptorProto -> .proto text (what a descriptor registration is served as) -------

_SCALARS = {getattr(FieldProto, f"TYPE_{n.upper()}"): n for n in (
    "double", "float", "int64", "uint64", "int32", "fixed64", "fixed32", "bool", "string",
    "bytes", "uint32", "sfixed32", "sfixed64", "sint32", "sint64")}


def to_text(proto: FDP) -> str:
    """``.proto`` source for a descriptor: syntax, package, imports, messages (nested,
    maps, oneofs, proto3 optional, reserved), enums, services; file options that name
    packages. Comments and custom options are not in a descriptor and not printed."""
    syntax = proto.syntax or "proto2"
    lines = [f'syntax = "{syntax}";']
    if proto.package:
        lines.append(f"package {proto.package};")
    for dep in proto.dependency:
        lines.append(f'import "{dep}";')
    for option in ("java_package", "java_outer_classname", "go_package", "csharp_namespace"):
        if proto.options.HasField(option):
            lines.append(f'option {option} = "{getattr(proto.options, option)}";')
    if proto.options.HasField("java_multiple_files"):
        lines.append(f"option java_multiple_files = "
                     f"{str(proto.options.java_multiple_files).lower()};")
    for enum in proto.enum_type:
        lines += _enum_text(enum, "")
    for message in proto.message_type:
        lines += _message_text(message, "", syntax)
    for service in proto.service:
        lines.append(f"service {service.name} {{")
        for method in service.method:
            cin = "stream " if method.client_streaming else ""
            cout = "stream " if method.server_streaming else ""
            lines.append(f"  rpc {method.name}({cin}{method.input_type}) returns "
                         f"({cout}{method.output_type});")
        lines.append("}")
    return "\n".join(lines) + "\n"


def _enum_text(enum: descriptor_pb2.EnumDescriptorProto, indent: str) -> list[str]:
    lines = [f"{indent}enum {enum.name} {{"]
    lines += [f"{indent}  {v.name} = {v.number};" for v in enum.value]
    lines.append(f"{indent}}}")
    return lines


def _field_type(f: FieldProto) -> str:
    return _SCALARS.get(f.type) or str(f.type_name)


def _message_text(message: descriptor_pb2.DescriptorProto, indent: str,
                  syntax: str) -> list[str]:
    lines = [f"{indent}message {message.name} {{"]
    inner = indent + "  "
    maps = {f".{n.name}": n for n in message.nested_type if n.options.map_entry}
    entries = {n.name for n in message.nested_type if n.options.map_entry}
    for nested in message.nested_type:
        if nested.name not in entries:
            lines += _message_text(nested, inner, syntax)
    for enum in message.enum_type:
        lines += _enum_text(enum, inner)
    real_oneofs: dict[int, list[FieldProto]] = {}
    for f in message.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            real_oneofs.setdefault(f.oneof_index, []).append(f)
    printed: set[int] = set()
    for f in message.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            if f.oneof_index in printed:
                continue
            printed.add(f.oneof_index)
            lines.append(f"{inner}oneof {message.oneof_decl[f.oneof_index].name} {{")
            lines += [f"{inner}  {_field_type(g)} {g.name} = {g.number};"
                      for g in real_oneofs[f.oneof_index]]
            lines.append(f"{inner}}}")
            continue
        entry = next((m for name, m in maps.items() if f.type_name.endswith(name)), None)
        if entry is not None and f.label == FieldProto.LABEL_REPEATED:
            key, value = entry.field[0], entry.field[1]
            lines.append(f"{inner}map<{_field_type(key)}, {_field_type(value)}> {f.name} = "
                         f"{f.number};")
            continue
        label = ""
        if f.label == FieldProto.LABEL_REPEATED:
            label = "repeated "
        elif f.label == FieldProto.LABEL_REQUIRED:
            label = "required "
        elif f.proto3_optional or syntax == "proto2":
            label = "optional "
        lines.append(f"{inner}{label}{_field_type(f)} {f.name} = {f.number};")
    for r in message.reserved_range:
        span = str(r.start) if r.end == r.start + 1 else f"{r.start} to {r.end - 1}"
        lines.append(f"{inner}reserved {span};")
    if message.reserved_name:
        names = ", ".join(f'"{n}"' for n in message.reserved_name)
        lines.append(f"{inner}reserved {names};")
    lines.append(f"{indent}}}")
    return lines
