"""The package map in docs/development.md holds: each package imports only what it may, and no
module of the tree (`webhook`, `kubefake`, `bench`, `tests`) imports itself through others (an import cycle)."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "webhook"
BASE = {"kinds", "config", "deadline", "metrics", "logs", "background"}
RULES = {"rules", "rules/shared", "rules/fit", "rules/kubevirt", "rules/placement", "rules/keeping"}
# What each part of the package may import from the rest of it (the map in docs/development.md).
MAY_IMPORT = {
    "kinds": set(),
    "config": {"kinds"},
    "deadline": set(),
    "metrics": set(),
    "logs": set(),
    "background": set(),
    "rules": {"kinds", "config"},
    "rules/shared": {"kinds", "config"},
    "rules/fit": {"kinds", "config", "rules/shared"},
    "rules/kubevirt": {"kinds", "rules/shared"},
    # Placement and keeping both stand on what is beneath them, never on each other.
    "rules/placement": {"kinds", "config", "rules/shared", "rules/fit", "rules/kubevirt"},
    "rules/keeping": {"kinds", "config", "rules/shared"},
    # What both processes run on (the loop, signals, the ports, pacing): it names neither role.
    "process": {"metrics", "deadline"},
    # I/O only: requests, list/watch, tables, Events, paced on the loop; it knows no rule.
    "cluster": BASE | {"process"},
    # Where the rules' facts come from: the stores keep and index what the rules declare they read
    # and build the checks' view of the cluster; never what a rule decides, nor either role.
    "stores": BASE | {"cluster", "rules/shared", "rules/fit"},
    # The rules' questions asked of a Store, for both roles and the tools.
    "lookup": BASE | RULES | {"cluster", "stores"},
    # Each role stands on what both share, never on the other.
    "admission": BASE | RULES | {"cluster", "stores", "lookup", "process"},
    "keeper": BASE | RULES | {"cluster", "stores", "lookup", "process"},
    "tools": BASE | RULES | {"cluster", "stores", "lookup", "admission", "keeper"},
    "cli": BASE | RULES | {"cluster", "stores", "lookup", "process", "admission", "keeper", "tools",
                           "__init__"},  # __init__: the version
    "__main__": {"cli"},
    "__init__": set(),
}


def module_name(path: Path) -> str:
    """`webhook.rules.fit.checks` for webhook/rules/fit/checks.py, `webhook.rules.fit` for its __init__."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = sorted(PACKAGE.rglob("*.py"))
NAMES = {module_name(m): m for m in MODULES}
# Every module of the tree: the tests, the benchmarks and kubefake with the shipped package.
TREE = {module_name(m): m for package in ("webhook", "kubefake", "bench", "tests")
        for m in sorted((ROOT / package).rglob("*.py"))}


def is_package(name: str) -> bool:
    return TREE[name].name == "__init__.py"


def imported_modules(name: str, source: str, known: dict[str, Path] = NAMES) -> set[str]:
    """The modules of `known` (those of `webhook`) that module `name` imports, anywhere in it
    (under `if TYPE_CHECKING:` and inside functions too); `from pkg import sub` counts as importing
    the submodule `pkg.sub`."""
    package = name if is_package(name) else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in known else target)
    return {module for module in found if module in known}


def import_graph(sources: dict[str, str], known: dict[str, Path] = NAMES) -> dict[str, set[str]]:
    return {name: imported_modules(name, source, known) - {name} for name, source in sources.items()}


def first_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the graph as the list of modules along it (the first repeated at the end), or None."""
    state: dict[str, str] = {}  # "open" while on the path, "done" once all it reaches is explored
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for other in sorted(graph.get(module, ())):
            if state.get(other) == "open":
                return path[path.index(other):] + [other]
            if other not in state and (cycle := visit(other)):
                return cycle
        path.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


SOURCES = {name: path.read_text() for name, path in NAMES.items()}


def part_of(name: str) -> str:
    """The row of the package map a module belongs to: `rules/fit` for webhook.rules.fit.checks."""
    parts = name.split(".")[1:]
    if not parts:
        return "__init__"
    if parts[0] == "rules" and len(parts) > 1 and f"rules/{parts[1]}" in RULES:
        return f"rules/{parts[1]}"
    return parts[0]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: str(m.relative_to(PACKAGE)))
def test_each_module_imports_only_what_its_package_may(module):
    name = module_name(module)
    part = part_of(name)
    assert part in MAY_IMPORT, f"{part} is not in the package map of docs/development.md"
    others = {part_of(m) for m in imported_modules(name, SOURCES[name])} - {part}
    assert others <= MAY_IMPORT[part], f"{module.relative_to(PACKAGE)} imports {sorted(others - MAY_IMPORT[part])}"


def test_no_import_cycle():
    cycle = first_cycle(import_graph(SOURCES))
    assert cycle is None, "import cycle: " + " → ".join(cycle or ())


def test_no_import_cycle_in_the_tree():
    """The tests, the benchmarks and kubefake too: a lazy import inside a function closes a cycle all the same."""
    sources = {name: path.read_text() for name, path in TREE.items()}
    cycle = first_cycle(import_graph(sources, TREE))
    assert cycle is None, "import cycle: " + " → ".join(cycle or ())


def test_the_checker_sees_imports():
    """A module known to import across packages is seen doing so (the tests above are not vacuous)."""
    parts = {part_of(m) for m in imported_modules("webhook.admission.admit", SOURCES["webhook.admission.admit"])}
    assert {"rules/placement", "stores", "kinds"} <= parts
    assert imported_modules("webhook.config", SOURCES["webhook.config"]) == {"webhook.kinds"}
    assert {part_of(m) for m in imported_modules("webhook.rules.shared.classify",
                                                 SOURCES["webhook.rules.shared.classify"])} == {"kinds", "config", "rules/shared"}


def test_a_cycle_is_found_and_named():
    """One import added to the real sources, under TYPE_CHECKING as through `from pkg import
    submodule`, closes a cycle the test names."""
    sources = dict(SOURCES)
    sources["webhook.rules.fit.fields"] += "\nif TYPE_CHECKING:\n    from . import checks\n"
    cycle = first_cycle(import_graph(sources))
    assert cycle is not None and cycle[0] == cycle[-1]
    assert "webhook.rules.fit.fields" in cycle and "webhook.rules.fit.checks" in cycle
    sources = dict(SOURCES)
    sources["webhook.kinds"] += "\nfrom .rules.placement.decide import Decision\n"
    assert "webhook.kinds" in (first_cycle(import_graph(sources)) or [])


@pytest.mark.parametrize("module, other", [
    ("webhook.rules.placement.together", "webhook.rules.keeping.running"),
    ("webhook.rules.keeping.apart", "webhook.rules.placement.decide"),
])
def test_placement_and_keeping_never_import_each_other(module, other):
    """What both need sits beneath them (`rules/kubevirt`, `rules/shared`): one more import of the
    other from either is refused by the map."""
    part = part_of(module)
    others = {part_of(m) for m in imported_modules(module, SOURCES[module] + f"\nimport {other}\n")} - {part}
    assert part_of(other) in others and not others <= MAY_IMPORT[part]


# What writes to the cluster, by the name it is called by: observing calls none of these.
WRITES = {"create_migration", "delete_migration", "unpause_vmi", "StateStore", "write", "dry_run", "emit", "emit_about",
          "change", "carry_out", "ask_targeted"}


def called_names(source: str) -> set[str]:
    """The names a module calls (`f(...)`, `obj.f(...)`) or imports."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            found.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
        elif isinstance(node, ast.ImportFrom):
            found |= {alias.name for alias in node.names}
    return found


def test_the_keeper_observes_with_reads_alone_and_acts_apart_from_observing():
    """The pass is observe (reads only) → plan (pure) → act (writes only): `keeper/observe.py` calls
    nothing that writes (the dry run of targeted migration is a probe of its own), and `act` takes
    nothing from `observe`."""
    assert called_names(SOURCES["webhook.keeper.observe"]) & WRITES == set()
    assert "webhook.keeper.observe" not in imported_modules("webhook.keeper.act", SOURCES["webhook.keeper.act"])
    planted = SOURCES["webhook.keeper.observe"] + "\nasync def probe(targeted, made):\n    await targeted.dry_run(made)\n"
    assert called_names(planted) & WRITES == {"dry_run"}
    planted = SOURCES["webhook.keeper.act"] + "\nfrom .observe import Observer\n"
    assert "webhook.keeper.observe" in imported_modules("webhook.keeper.act", planted)


def test_the_plan_is_pure():
    """`rules/keeping/plan.py` imports nothing that reads or writes the cluster (the map holds `rules`
    to that), and the keeper's pass and `status` both call it."""
    assert {part_of(m) for m in imported_modules("webhook.rules.keeping.plan", SOURCES["webhook.rules.keeping.plan"])} \
        <= MAY_IMPORT["rules/keeping"] | {"rules/keeping"}
    for caller in ("webhook.keeper.keeper", "webhook.tools.status"):
        assert "webhook.rules.keeping.plan" in imported_modules(caller, SOURCES[caller])
        assert "plan" in called_names(SOURCES[caller]), caller
# --------------------------------------------------------------------------- each role in its room

# The modules each role runs in its process: its package and its verb (cli/serve.py, cli/keep.py);
# the tools (`review`, `explain`, `status`, `certs`) judge as both roles do, and so do the flags.
ROLES = {"admission": ("webhook.admission", "webhook.cli.serve"), "keeper": ("webhook.keeper", "webhook.cli.keep"),
         "tools": ("webhook.tools", "webhook.cli.review", "webhook.cli.report", "webhook.cli.certs"),
         "cli": ("webhook.cli.parser",)}


def role_of(name: str) -> str | None:
    return next((role for role, starts in ROLES.items()
                 if any(name == start or name.startswith(start + ".") for start in starts)), None)


def reached(graph: dict[str, set[str]], starts: set[str]) -> set[str]:
    """Every module `starts` import, directly or through others (inside functions too)."""
    seen, todo = set(), list(starts)
    while todo:
        for other in graph.get(todo.pop(), ()):
            if other not in seen:
                seen.add(other)
                todo.append(other)
    return seen


GRAPH = import_graph(SOURCES)


def of_role(role: str, names=NAMES) -> set[str]:
    return {name for name in names if role_of(name) == role}


def test_the_keepers_process_never_imports_admission():
    """`keep` runs on what both share (process/), never on admission's parts."""
    found = sorted(m for m in reached(GRAPH, of_role("keeper") | of_role("cli")) if role_of(m) == "admission")
    assert found == [], f"the keeper's process imports {found}"


def test_admission_never_imports_the_keeper():
    found = sorted(m for m in reached(GRAPH, of_role("admission") | of_role("cli")) if role_of(m) == "keeper")
    assert found == [], f"admission imports {found}"


def test_the_role_checks_see_a_crossing():
    """One import of admission's from the keeper's verb is seen (the checks above are not vacuous)."""
    graph = import_graph({**SOURCES, "webhook.cli.keep": SOURCES["webhook.cli.keep"] +
                          "\nfrom ..admission.budget import DEFAULT_BYTES\n"})
    assert "webhook.admission.budget" in reached(graph, of_role("keeper"))


def used_by_one_role(graph: dict[str, set[str]]) -> list[str]:
    """The shared modules (cluster/, lookup/, process/, rules/, the base modules) only one role's
    modules reach, directly or through others: `module: role`."""
    users: dict[str, set[str]] = {name: set() for name in graph}
    for name in graph:
        if (role := role_of(name)) is not None:
            for module in reached(graph, {name}):
                users.setdefault(module, set()).add(role)
    return sorted(f"{name}: {role}" for name, roles in users.items() if role_of(name) is None
                  and part_of(name) not in ("cli", "__main__", "__init__") and len(roles) == 1
                  for role in roles if role in ("admission", "keeper"))


def test_no_module_used_by_one_role_only_lives_outside_its_package():
    """Such a module belongs in that role's package."""
    alone = used_by_one_role(GRAPH)
    assert alone == [], "used by one role only: " + ", ".join(alone)


def test_a_module_of_one_role_outside_its_package_is_seen():
    """The stranded-pod report back in cluster/, imported by `serve` alone, is named."""
    graph = {name: {"webhook.cluster.reporter" if m == "webhook.admission.stranded" else m for m in imports}
             for name, imports in GRAPH.items() if name != "webhook.admission.stranded"}
    graph["webhook.cluster.reporter"] = GRAPH["webhook.admission.stranded"]
    assert used_by_one_role(graph) == ["webhook.cluster.reporter: admission"]


def cluster_imports(graph: dict[str, set[str]]) -> set[str]:
    """The parts of the package cluster/'s modules import, cluster/ aside."""
    return {part_of(m) for name, imports in graph.items() if part_of(name) == "cluster" for m in imports} - {"cluster"}


def test_cluster_does_io_only():
    """cluster/ reads and writes the API and knows no rule: no part of rules/ (not even the
    declarations), no store, no role, nothing that asks the rules' questions."""
    assert cluster_imports(GRAPH) <= MAY_IMPORT["cluster"]


def test_a_rule_in_cluster_is_seen():
    """One import of a rule's helper from cluster/ (as events.py once formatted its times) is named."""
    planted = SOURCES["webhook.cluster.events"] + "\nfrom ..rules.shared.times import rfc3339\n"
    graph = {**GRAPH, "webhook.cluster.events": imported_modules("webhook.cluster.events", planted)}
    assert cluster_imports(graph) - MAY_IMPORT["cluster"] == {"rules/shared"}
