"""Every function in webhook/ reads in one screen: at most 50 lines (its def line to its last,
docstring included) and 8 parameters (self and cls not counted); every module at most 450 lines."""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "webhook"
MAX_LINES, MAX_PARAMETERS = 50, 8
MAX_MODULE_LINES = 450


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = node.args
    named = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    count = len(named) + (args.vararg is not None) + (args.kwarg is not None)
    return count - (bool(named) and named[0].arg in ("self", "cls"))


def oversized(source: str, where: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines, params = node.end_lineno - node.lineno + 1, parameters(node)
            if lines > MAX_LINES or params > MAX_PARAMETERS:
                found.append(f"{where}:{node.lineno} {node.name}: {lines} lines, {params} parameters")
    return found


def test_no_function_is_too_long_or_takes_too_many_parameters():
    found = [line for path in sorted(PACKAGE.rglob("*.py"))
             for line in oversized(path.read_text(), str(path.relative_to(PACKAGE.parent)))]
    assert not found, "over 50 lines or 8 parameters:\n" + "\n".join(found)


def test_the_check_sees_a_long_function_and_a_wide_one():
    long = "def f():\n" + "    x = 1\n" * 50
    wide = "class C:\n    def m(self, a, b, c, d, e, f, g, h, *, i):\n        pass\n"
    fits = "class C:\n    def m(self, a, b, c, d, e, f, g, h):\n        pass\n"
    assert oversized(long, "x") == ["x:1 f: 51 lines, 0 parameters"]
    assert oversized(wide, "x") == ["x:2 m: 2 lines, 9 parameters"]
    assert oversized(fits, "x") == []


def too_long(source: str, where: str) -> list[str]:
    lines = len(source.splitlines())
    return [f"{where}: {lines} lines"] if lines > MAX_MODULE_LINES else []


def test_no_module_is_over_450_lines():
    found = [line for path in sorted(PACKAGE.rglob("*.py"))
             for line in too_long(path.read_text(), str(path.relative_to(PACKAGE.parent)))]
    assert not found, "over 450 lines (one concern per module):\n" + "\n".join(found)


def test_the_check_sees_a_long_module():
    assert too_long("x = 1\n" * 451, "m.py") == ["m.py: 451 lines"]
    assert too_long("x = 1\n" * 450, "m.py") == []
