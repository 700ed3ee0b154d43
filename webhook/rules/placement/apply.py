"""Apply a JSON patch to an object or a copy of it: the safety net before a patch is returned.

A patch that decodes but does not apply fails pod creation even with failurePolicy Ignore,
so every patch is applied to the object it was made for first. The rules emit only `add`
(RFC 6902 §4.1); `apply` applies those by copying just the containers on each operation's
path, or, `in_place`, to the object itself (the server's own parsed review, which nothing
reads a patched field of afterwards). jsonpatch copies the whole pod and every value, and
parses each path into a pointer: for a virt-launcher pod that is about as much CPU as the rest
of the admission together; in place it still copies every value and parses every path twice.
Any other operation goes through jsonpatch itself. `apply` agrees with jsonpatch
(tests/rules/placement/test_apply.py); the operations are never modified, nor the object
unless `in_place`.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jsonpatch


class PatchError(jsonpatch.JsonPatchConflict):
    """An operation that does not apply to the object."""


def apply(doc: Any, ops: Sequence[dict[str, Any]], *, in_place: bool = False) -> Any:
    """The patched copy of `doc`, or `in_place` `doc` itself patched (partly, when an operation
    does not apply); raises a jsonpatch exception when an operation does not apply."""
    if not all(isinstance(op, dict) and op.get("op") == "add" for op in ops):
        return jsonpatch.apply_patch(doc, list(ops), in_place=in_place)
    copied: dict[int, Any] = {}  # id -> our copy, kept alive so that its id stays its own
    values: dict[int, Any] = {}  # in place: id -> an operation's value, which stays the patch's
    root = doc
    for op in ops:
        path = op.get("path")
        if "value" not in op or not isinstance(path, str):
            raise jsonpatch.InvalidJsonPatch(f"an add operation needs a string path and a value: {op!r}")
        if path == "":
            root = values[id(op["value"])] = op["value"]  # the whole document; a later operation copies it first
            continue
        if path[0] != "/":
            raise jsonpatch.InvalidJsonPatch(f"path {path!r} does not start with '/'")
        *walk, last = _tokens(path)
        if not in_place or id(root) in values:
            root = _own(root, copied)
        parent = root
        for token in walk:  # copy-on-write: only the containers on the path that are not ours
            child = _child(parent, token, path)
            if not in_place or id(child) in values or id(parent) in copied:
                child = _own(child, copied)
                parent[token if isinstance(parent, dict) else int(token)] = child
            parent = child
        _add(parent, last, op["value"], path)
        values[id(op["value"])] = op["value"]
    return root


def _tokens(path: str) -> list[str]:
    """The reference tokens of a path below the root (RFC 6901 knows only the escapes ~0 and ~1)."""
    tokens = path[1:].split("/")
    if "~" not in path:
        return tokens
    if path.count("~") != path.count("~0") + path.count("~1"):
        raise jsonpatch.JsonPointerException(f"{path}: '~' must be followed by 0 or 1")
    return [t.replace("~1", "/").replace("~0", "~") for t in tokens]


def _own(value: Any, copied: dict[int, Any]) -> Any:
    """`value` itself when it is ours to change (a copy made earlier, or no container), else a shallow copy."""
    if id(value) in copied or not isinstance(value, (dict, list)):
        return value
    copy = value.copy()
    copied[id(copy)] = copy
    return copy


def _is_index(token: str) -> bool:
    """RFC 6901 array index: ASCII digits, no sign, no leading zero."""
    return token.isdigit() and token.isascii() and (token[0] != "0" or token == "0")


def _child(parent: Any, token: str, path: str) -> Any:
    if isinstance(parent, dict):
        if token not in parent:
            raise PatchError(f"{path}: member {token!r} not found")
        return parent[token]
    if isinstance(parent, list):
        if not _is_index(token) or int(token) >= len(parent):
            raise PatchError(f"{path}: no index {token!r} in a list of {len(parent)}")
        return parent[int(token)]
    raise PatchError(f"{path}: {token!r} under a {type(parent).__name__}")


def _add(parent: Any, token: str, value: Any, path: str) -> None:
    if isinstance(parent, dict):
        parent[token] = value
    elif isinstance(parent, list):
        if token == "-":
            parent.append(value)
        elif _is_index(token) and int(token) <= len(parent):
            parent.insert(int(token), value)
        else:
            raise PatchError(f"{path}: cannot insert at {token!r} in a list of {len(parent)}")
    else:
        raise PatchError(f"{path}: cannot add under a {type(parent).__name__}")
