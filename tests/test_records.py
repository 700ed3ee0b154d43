"""Records are built by keyword: a dataclass or NamedTuple of webhook/ is never given more than
three arguments by position, so a reader sees which value is which field, and a field added or
moved cannot shift the others silently."""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "webhook"
MOST_BY_POSITION = 3


def record(node: ast.ClassDef) -> bool:
    """A dataclass (decorated, with or without arguments) or a NamedTuple subclass."""
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if (isinstance(target, ast.Name) and target.id == "dataclass") or \
                (isinstance(target, ast.Attribute) and target.attr == "dataclass"):
            return True
    return any((isinstance(base, ast.Name) and base.id == "NamedTuple") or
               (isinstance(base, ast.Attribute) and base.attr == "NamedTuple") for base in node.bases)


def records(trees: list[ast.Module]) -> set[str]:
    return {node.name for tree in trees for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and record(node)}


def built_by_position(tree: ast.Module, names: set[str]) -> list[tuple[int, str]]:
    """Each construction of one of the records `names` with more than three positional arguments."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if name in names and (len(node.args) > MOST_BY_POSITION or any(isinstance(a, ast.Starred) for a in node.args)):
            found.append((node.lineno, f"{name}: {len(node.args)} arguments by position"))
    return sorted(found)


def test_no_record_is_built_by_position():
    sources = {path: path.read_text() for path in sorted(PACKAGE.rglob("*.py"))}
    trees = {path: ast.parse(source) for path, source in sources.items()}
    names = records(list(trees.values()))
    found = [f"{path.relative_to(PACKAGE.parent)}:{line} {what}"
             for path, tree in trees.items() for line, what in built_by_position(tree, names)]
    assert not found, "records built by position:\n" + "\n".join(found)


def test_the_check_sees_a_wide_record_built_by_position():
    source = '''\
import dataclasses
from typing import NamedTuple


@dataclasses.dataclass(frozen=True)
class Wide:
    a: int
    b: int
    c: int
    d: int


class Row(NamedTuple):
    a: int
    b: int
    c: int
    d: int


class Plain:
    def __init__(self, a, b, c, d): ...


ok = Wide(1, 2, 3, d=4), Row(a=1, b=2, c=3, d=4), Plain(1, 2, 3, 4)
bad = Wide(1, 2, 3, 4), Row(*range(4))
'''
    tree = ast.parse(source)
    assert built_by_position(tree, records([tree])) == [(25, "Row: 1 arguments by position"),
                                                        (25, "Wide: 4 arguments by position")]
