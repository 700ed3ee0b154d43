"""Apply a JSON patch to a copy of an object, cheaply: the safety net before a patch is returned.

A patch that decodes but does not apply fails pod creation even with failurePolicy Ignore,
so every patch is checked against the object it was made for. The rules emit only `add`
(RFC 6902 §4.1); `apply` applies those by copying just the containers on each operation's
path, not the whole pod (jsonpatch deep-copies the document and every value: ~150 µs for a
virt-launcher pod, most of an admission). Any other operation goes through jsonpatch.
`check` only says whether a patch applies, without building the result. Both agree with
jsonpatch (tests/rules/test_apply.py). The object and the operations are never modified.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jsonpatch



def _refuse_bad_escapes(path: str) -> None:
    """RFC 6901 knows only ~0 and ~1 (jsonpatch refuses the rest)."""
    if path.count("~") != path.count("~0") + path.count("~1"):
        raise jsonpatch.JsonPointerException(f"{path}: '~' must be followed by 0 or 1")


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
            _refuse_bad_escapes(path)
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


def check(doc: Any, ops: Sequence[dict[str, Any]]) -> None:
    """Raise the jsonpatch exception `apply` would raise when the patch does not apply; build nothing.

    Each `add` is followed down the original object: as long as no operation goes through or
    inserts into a container an earlier one added to, every path sees exactly what it would
    see in the patched object, so the original answers. Otherwise, and for anything but a
    well-formed `add` below the root, the patch is applied for real. Containers are known by
    their paths (a JSON document shares none), so "goes through" is "starts with that path
    and a slash"; an operation with the parent of the one before (annotations, one after the
    other) starts from that parent. Written for few bytecodes: it runs on every pin.
    """
    added_to: tuple[str, ...] = ()  # the parent paths added to so far, each followed by "/"
    before = None  # the parent path of the operation before, followed by "/"
    parent: Any = None  # and its container
    for op in ops:
        path = op.get("path") if type(op) is dict else None
        if type(path) is not str or op.get("op") != "add" or "value" not in op or path[:1] != "/":
            apply(doc, ops)  # jsonpatch's own verdict (the whole document replaced, another op, a malformed one)
            return
        up, walk, last = _POINTERS.get(path) or _pointer(path)
        if up == before:
            # The parent of the operation before, which only added to it: a dict takes any member.
            if type(parent) is not dict:
                apply(doc, ops)  # a list: the insert before moved the indexes
                return
            continue
        if added_to and up.startswith(added_to):
            apply(doc, ops)  # goes through what an earlier operation added to
            return
        parent = doc
        for token in walk:
            if type(parent) is dict and token in parent:  # the common case, inline
                parent = parent[token]
            else:
                parent = _child(parent, token, path)
        before = up
        if up not in added_to:
            added_to += (up,)
        elif isinstance(parent, list):
            apply(doc, ops)  # an earlier insert moved the indexes
            return
        if type(parent) is not dict:
            if isinstance(parent, list):
                # A token with "~" in it is no index and no "-", escaped or not.
                if last != "-" and not (_is_index(last) and int(last) <= len(parent)):
                    raise PatchError(f"{path}: cannot insert at {last!r} in a list of {len(parent)}")
            elif not isinstance(parent, dict):
                raise PatchError(f"{path}: cannot add under a {type(parent).__name__}")


# Paths read before, as `_pointer` reads them: a patch's paths are much the same from one pod to
# the next (our annotations' are the very same strings), and reading one costs several new strings.
_POINTERS: dict[str, tuple[str, tuple[str, ...], str]] = {}
_POINTERS_MAX = 4096


def _pointer(path: str) -> tuple[str, tuple[str, ...], str]:
    """A path below the root as (its parent's path and "/", the parent's tokens, the last
    token); raises on escapes RFC 6901 does not know, as jsonpatch does."""
    if "~" in path:
        _refuse_bad_escapes(path)
    up, _, last = path.rpartition("/")
    walk = up[1:].split("/") if up else []
    if "~" in path:
        walk = [t.replace("~1", "/").replace("~0", "~") for t in walk]
    read = (f"{up}/", tuple(walk), last)
    if len(_POINTERS) < _POINTERS_MAX:
        _POINTERS[path] = read
    return read


def _is_index(token: str) -> bool:
    """RFC 6901 array index: ASCII digits, no sign, no leading zero (no regex: it is asked on every pin)."""
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
