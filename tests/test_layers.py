"""The package map in docs/development.md holds: each package imports only what it may."""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "webhook"
BASE = {"kinds", "config", "deadline", "metrics", "logs", "background"}
# What each part of the package may import from the rest of it (the map in docs/development.md).
MAY_IMPORT = {
    "kinds": set(),
    "config": {"kinds"},
    "deadline": set(),
    "metrics": set(),
    "logs": set(),
    "background": set(),
    "rules": {"kinds", "config"},
    "cluster": BASE | {"rules"},
    "admission": BASE | {"rules", "cluster"},
    "keeper": BASE | {"rules", "cluster"},
    "tools": BASE | {"rules", "cluster", "admission", "keeper"},
    "__main__": BASE | {"rules", "cluster", "admission", "keeper", "tools"},
    "__init__": set(),
}


def part_of(module: Path) -> str:
    relative = module.relative_to(PACKAGE)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def imported_parts(module: Path) -> set[str]:
    """The parts of the package a module imports (relative or absolute imports)."""
    tree = ast.parse(module.read_text())
    depth = len(module.relative_to(PACKAGE).parts) - 1  # 0 for webhook/x.py, 1 for webhook/rules/x.py
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                up = node.level - 1  # levels above the module's own package
                if up > depth:
                    continue
                prefix = list(module.relative_to(PACKAGE).parts[:depth - up]) if depth - up > 0 else []
                target = prefix + (node.module.split(".") if node.module else [])
                if not target:  # `from .. import kinds, metrics`
                    found |= {alias.name for alias in node.names}
                else:
                    found.add(target[0])
            elif node.module and node.module.split(".")[0] == "webhook":
                rest = node.module.split(".")[1:]
                found |= {rest[0]} if rest else {alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "webhook" and len(parts) > 1:
                    found.add(parts[1])
    return found


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("module", MODULES, ids=lambda m: str(m.relative_to(PACKAGE)))
def test_each_module_imports_only_what_its_package_may(module):
    part = part_of(module)
    assert part in MAY_IMPORT, f"{part} is not in the package map of docs/development.md"
    others = imported_parts(module) - {part}
    assert others <= MAY_IMPORT[part], f"{module.relative_to(PACKAGE)} imports {sorted(others - MAY_IMPORT[part])}"


def test_the_checker_sees_imports():
    """A module known to import across packages is seen doing so (the test above is not vacuous)."""
    assert {"rules", "cluster", "kinds"} <= imported_parts(PACKAGE / "admission" / "admit.py")
    assert "kinds" in imported_parts(PACKAGE / "config.py")
    assert imported_parts(PACKAGE / "rules" / "classify.py") == {"kinds", "config"}
