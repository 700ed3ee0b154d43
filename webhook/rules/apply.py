"""Apply a JSON patch to a copy of an object, cheaply: the safety net before a patch is returned.

A patch that decodes but does not apply fails pod creation even with failurePolicy Ignore,
so every patch is applied to the object it was made for. The rules emit only `add`
(RFC 6902 §4.1); those are applied here by copying just the containers on each operation's
path, not the whole pod (jsonpatch deep-copies the document and every value: ~150 µs for a
virt-launcher pod, most of an admission). Any other operation goes through jsonpatch.
The object and the operations are never modified.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import jsonpatch

_INDEX = re.compile(r"0|[1-9][0-9]*")  # RFC 6901 array index: no sign, no leading zero


class PatchError(jsonpatch.JsonPatchConflict):
    """An operation that does not apply to the object."""


def apply(doc: Any, ops: Sequence[dict[str, Any]]) -> Any:
    """The patched copy of `doc`; raises a jsonpatch exception when an operation does not apply."""
    for op in ops:
        if not isinstance(op, dict) or op.get("op") != "add":
            return jsonpatch.apply_patch(doc, list(ops))
    copies: list[Any] = []  # keeps our copies alive, so that their ids stay theirs
    copied: set[int] = set()
    root = doc
    for op in ops:
        path = op.get("path")
        if "value" not in op or not isinstance(path, str):
            raise jsonpatch.InvalidJsonPatch(f"an add operation needs a string path and a value: {op!r}")
        if path == "":
            root = op["value"]  # replaces the whole document; a later operation copies it first
            continue
        if path[0] != "/":
            raise jsonpatch.InvalidJsonPatch(f"path {path!r} does not start with '/'")
        tokens = path[1:].split("/")
        if "~" in path:
            tokens = [t.replace("~1", "/").replace("~0", "~") for t in tokens]
        if id(root) not in copied and isinstance(root, (dict, list)):
            root = root.copy()
            copies.append(root)
            copied.add(id(root))
        parent = root
        for token in tokens[:-1]:
            child = _child(parent, token, path)
            if id(child) not in copied and isinstance(child, (dict, list)):
                child = child.copy()  # copy-on-write: only containers on the path
                copies.append(child)
                copied.add(id(child))
                parent[token if isinstance(parent, dict) else int(token)] = child
            parent = child
        _add(parent, tokens[-1], op["value"], path)
    return root


def _child(parent: Any, token: str, path: str) -> Any:
    if isinstance(parent, dict):
        if token not in parent:
            raise PatchError(f"{path}: member {token!r} not found")
        return parent[token]
    if isinstance(parent, list):
        if not _INDEX.fullmatch(token) or int(token) >= len(parent):
            raise PatchError(f"{path}: no index {token!r} in a list of {len(parent)}")
        return parent[int(token)]
    raise PatchError(f"{path}: {token!r} under a {type(parent).__name__}")


def _add(parent: Any, token: str, value: Any, path: str) -> None:
    if isinstance(parent, dict):
        parent[token] = value
    elif isinstance(parent, list):
        if token == "-":
            parent.append(value)
        elif _INDEX.fullmatch(token) and int(token) <= len(parent):
            parent.insert(int(token), value)
        else:
            raise PatchError(f"{path}: cannot insert at {token!r} in a list of {len(parent)}")
    else:
        raise PatchError(f"{path}: cannot add under a {type(parent).__name__}")
