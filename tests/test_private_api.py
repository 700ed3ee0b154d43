"""webhook/ uses other libraries through their public API alone: no `x._name` where `_name` is
not a name of the package's own, no `from lib import _name`, no `import lib._mod`, no
`getattr(x, "_name")`, and no subclass overriding a library's private method. A library may
change its private parts in any release; the next release must not break the webhook."""
import ast
import builtins
import importlib
import inspect
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "webhook"
# Documented API that happens to start with an underscore: namedtuple's methods and attributes
# (docs.python.org, collections.namedtuple) and os._exit.
DOCUMENTED = {"_replace", "_asdict", "_fields", "_field_defaults", "_make", "_exit"}
REFLECTION = {"getattr", "setattr", "hasattr", "delattr"}


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def foreign_module(module: str) -> bool:
    return module.split(".")[0] != "webhook"


def own_names(tree: ast.Module) -> set[str]:
    """The private names a module defines: functions, classes, variables, parameters, import
    aliases, the attributes it sets on `self` or `cls`, and `__slots__` entries; not those a class
    takes over from a library's class it derives from (`inherited`)."""
    found: set[str] = set()
    imports = imported_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
        elif isinstance(node, ast.alias) and node.asname:
            found.add(node.asname)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _on_self(node):
            found.add(node.attr)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                  for t in node.targets):
            found |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            found -= inherited(node, imports)
    return {name for name in found if private(name)}


def _on_self(node: ast.Attribute) -> bool:
    return isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")


def imported_names(tree: ast.Module) -> dict[str, str]:
    """What each name bound by an import of another library stands for: `{"HelpFormatter":
    "argparse.HelpFormatter", "web": "aiohttp.web"}`."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                head = alias.name.split(".")[0]
                names[alias.asname or head] = alias.name if alias.asname else head
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and foreign_module(node.module):
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (base := dotted(node.value)):
        return f"{base}.{node.attr}"
    return None


def foreign_class(base: ast.expr, imports: dict[str, str]) -> type | None:
    """The library class a class statement's base names, found by importing the library; None
    for a class of the package's own (or one that cannot be resolved from the source)."""
    name = dotted(base)
    if name is None:
        return None
    head, _, rest = name.partition(".")
    if head in imports:
        path = imports[head] + (f".{rest}" if rest else "")
    elif hasattr(builtins, head):
        path = f"builtins.{name}"
    else:
        return None
    if not foreign_module(path):
        return None
    parts = path.split(".")
    for split in range(len(parts) - 1, 0, -1):  # the longest importable prefix, then attributes
        try:
            value = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attr in parts[split:]:
            value = getattr(value, attr, None)
        return value if isinstance(value, type) else None
    return None


def inherited(node: ast.ClassDef, imports: dict[str, str]) -> set[str]:
    """The private names of the library classes a class derives from: their methods and class
    attributes, `__slots__`, and the attributes their source sets or reads on `self`."""
    names: set[str] = set()
    for base in (foreign_class(b, imports) for b in node.bases):
        for cls in base.__mro__ if base is not None else ():
            names |= set(vars(cls)) | set(getattr(cls, "__slots__", ()))
            try:
                names |= set(re.findall(r"\bself\.(\w+)", inspect.getsource(cls)))
            except (OSError, TypeError):
                pass  # a class without Python source (builtins)
    return {name for name in names if private(name)}


def taken_over(tree: ast.Module, imports: dict[str, str]) -> list[tuple[int, str]]:
    """What a class here uses or defines again of the private parts of a library's class it
    derives from: its methods overridden, its attributes read or written on `self`."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef) or not (theirs := inherited(node, imports)):
            continue
        for member in node.body:
            if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef) and member.name in theirs:
                found.append((member.lineno, f"overrides {member.name} of a library's class"))
        found += [(n.lineno, f"inherited attribute {n.attr}") for n in ast.walk(node)
                  if isinstance(n, ast.Attribute) and _on_self(n) and n.attr in theirs]
    return found


def offences(source: str, own: set[str]) -> list[tuple[int, str]]:
    """Each use of another library's private part in `source`, given the private names `own`
    that the package defines."""
    tree = ast.parse(source)
    found = taken_over(tree, imported_names(tree))
    seen = {(line, what.split()[-1]) for line, what in found}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr) and node.attr not in own | DOCUMENTED \
                and (node.lineno, node.attr) not in seen:
            found.append((node.lineno, f"attribute {node.attr}"))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names
                      if foreign_module(a.name) and any(private(p) for p in a.name.split("."))]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and foreign_module(node.module):
            if any(private(p) for p in node.module.split(".")):
                found.append((node.lineno, f"from {node.module}"))
            found += [(node.lineno, f"from {node.module} import {a.name}") for a in node.names if private(a.name)]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in REFLECTION \
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) \
                and isinstance(name := node.args[1].value, str) and private(name) and name not in own:
            found.append((node.lineno, f"{node.func.id} {name}"))
    return sorted(found)


def package_offences() -> list[str]:
    sources = {path: path.read_text() for path in sorted(PACKAGE.rglob("*.py"))}
    own = set().union(*(own_names(ast.parse(source)) for source in sources.values()))
    return [f"{path.relative_to(PACKAGE.parent)}:{line} {what}"
            for path, source in sources.items() for line, what in offences(source, own)]


def test_webhook_uses_no_private_part_of_another_library():
    found = package_offences()
    assert not found, "private parts of other libraries:\n" + "\n".join(found)


PLANTED = '''\
import argparse
import logging
import ssl._ssl
from aiohttp import web
from aiohttp.web_runner import _raise_graceful_exit
from asyncio import _get_running_loop


class Help(argparse.HelpFormatter):
    def _get_help_string(self, action):
        return action.help

    def _ours(self):
        return self._width


class Site(web.BaseSite):
    async def start(self):
        self._server = self._mine = None


def start(runner: web.AppRunner, server):
    runner._server = server
    logging._srcfile = None
    return getattr(server, "_kwargs"), server._ours()
'''


def test_the_check_sees_each_kind_of_private_use():
    own = own_names(ast.parse(PLANTED))
    assert own == {"_ours", "_mine"}
    assert offences(PLANTED, own) == [
        (3, "import ssl._ssl"),
        (5, "from aiohttp.web_runner import _raise_graceful_exit"),
        (6, "from asyncio import _get_running_loop"),
        (10, "overrides _get_help_string of a library's class"),
        (14, "inherited attribute _width"),
        (19, "inherited attribute _server"),
        (23, "attribute _server"),
        (24, "attribute _srcfile"),
        (25, "getattr _kwargs"),
    ]


def test_the_check_passes_own_privates_and_documented_names():
    source = '''\
import collections
from dataclasses import dataclass


class Own:
    __slots__ = ("_slot",)

    def __init__(self):
        self._state = 1

    def _helper(self):
        return self._state, self._slot


def f(point: collections.namedtuple, _unused=None):
    return point._replace(x=1)._asdict(), Own()._helper()
'''
    assert offences(source, own_names(ast.parse(source))) == []
