"""Secrets and ConfigMaps sent as Kubernetes protobuf, read into the JSON form the emulator keeps.

client-go's typed clients write these two kinds as `application/vnd.kubernetes.protobuf` (Helm
keeps its releases so, in Secrets), and an apiserver accepts it. A body is the magic `k8s\\0`
and a `runtime.Unknown` (field 1 its TypeMeta, field 2 the object's own bytes); the fields read
are those of `k8s.io/api/core/v1/generated.proto` and `apimachinery/.../meta/v1/generated.proto`
that such a client sets. Anything else is refused with ValueError.
"""
from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of each field: an int for varints, bytes for length-delimited ones."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
            yield number, value
        elif wire == 2:
            size, at = _varint(data, at)
            yield number, data[at:at + size]
            at += size
        elif wire == 1:
            yield number, data[at:at + 8]
            at += 8
        elif wire == 5:
            yield number, data[at:at + 4]
            at += 4
        else:
            raise ValueError(f"protobuf wire type {wire} is not read here")


def _entry(data: bytes) -> tuple[str, bytes]:
    """One entry of a protobuf map: field 1 the key, field 2 the value."""
    key, value = "", b""
    for number, field in _fields(data):
        if number == 1 and isinstance(field, bytes):
            key = field.decode()
        elif number == 2 and isinstance(field, bytes):
            value = field
    return key, value


def _text(value: int | bytes) -> str:
    assert isinstance(value, bytes)
    return value.decode()


# ObjectMeta: the string fields, then labels (11), annotations (12) and finalizers (14).
_META_STRINGS = {1: "name", 2: "generateName", 3: "namespace", 5: "uid", 6: "resourceVersion"}


def _metadata(data: bytes) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for number, value in _fields(data):
        if number in _META_STRINGS:
            if text := _text(value):
                meta[_META_STRINGS[number]] = text
        elif number in (11, 12):
            key, raw = _entry(value)  # type: ignore[arg-type]
            meta.setdefault("labels" if number == 11 else "annotations", {})[key] = raw.decode()
        elif number == 14:
            meta.setdefault("finalizers", []).append(_text(value))
    return meta


# The fields of each kind read: number -> (JSON field, how it is read).
SECRET = {1: ("metadata", "meta"), 2: ("data", "bytes-map"), 3: ("type", "text"), 4: ("stringData", "text-map"),
          5: ("immutable", "bool")}
CONFIG_MAP = {1: ("metadata", "meta"), 2: ("data", "text-map"), 3: ("binaryData", "bytes-map"), 4: ("immutable", "bool")}
DELETE_OPTIONS: dict[int, tuple[str, str]] = {}  # the emulator deletes at once, whatever they say
KINDS = {("v1", "Secret"): SECRET, ("v1", "ConfigMap"): CONFIG_MAP, ("v1", "DeleteOptions"): DELETE_OPTIONS}


def _read(api_version: str, kind: str, data: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind}
    fields = KINDS[api_version, kind]
    for number, value in _fields(data):
        if number not in fields:
            continue
        name, how = fields[number]
        if how == "meta":
            obj[name] = _metadata(value)  # type: ignore[arg-type]
        elif how == "text":
            obj[name] = _text(value)
        elif how == "bool":
            obj[name] = bool(value)
        else:  # a map: bytes values are base64 in JSON
            key, raw = _entry(value)  # type: ignore[arg-type]
            obj.setdefault(name, {})[key] = base64.b64encode(raw).decode() if how == "bytes-map" else raw.decode()
    return obj


def decode(body: bytes) -> dict[str, Any]:
    """The object a protobuf request body carries, as JSON would carry it."""
    if not body.startswith(MAGIC):
        raise ValueError("not a Kubernetes protobuf body (no k8s\\0 prefix)")
    api_version = kind = ""
    raw = b""
    for number, value in _fields(body[len(MAGIC):]):
        if number == 1 and isinstance(value, bytes):
            for inner, text in _fields(value):
                if inner == 1:
                    api_version = _text(text)
                elif inner == 2:
                    kind = _text(text)
        elif number == 2 and isinstance(value, bytes):
            raw = value
    if (api_version, kind) not in KINDS:
        raise ValueError(f"{api_version} {kind} in protobuf is not read here")
    return _read(api_version, kind, raw)
