"""The layout of docs/architecture.md, section 6, read from the code.

Every module of idemdash/, receipts/ and webhooks/ is parsed with `ast`, imports inside
functions included (a lazy import hides a cycle from Python, not from this test; only an
import under `if TYPE_CHECKING:` is left out, since it never runs). From them:

- no import cycles between modules;
- `idemdash.core` imports no app of ours;
- dependencies point one way: dashboard -> webhooks, outbox -> receipts -> core, and
  nothing imports upwards;
- no runtime module reads from `tests/`.

The KNOWN_* lists hold what is still true today, each entry with the step
that removes it. They can only shrink: an entry that no longer happens fails the test too,
so it is deleted and the violation cannot come back unnoticed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("idemdash", "receipts", "webhooks")

# ---------------------------------------------------------------------------------------
# Reading the import graph


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_modules() -> dict[str, Path]:
    """Every module of the three packages (the wheel's), by dotted name."""
    return {module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    """The dotted names one module imports, as (module, name or None) pairs: `from m import n`
    gives (m, n), `import m` gives (m, None); relative imports resolved against `package`."""

    def __init__(self, package: str) -> None:
        self.package = package
        self.found: set[tuple[str, str | None]] = set()

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.found.update((alias.name, None) for alias in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            parts = self.package.split(".")
            parent = parts[: len(parts) - (node.level - 1)]
            base = ".".join(parent + ([node.module] if node.module else []))
        self.found.update((base, alias.name) for alias in node.names)


def _longest_known_prefix(name: str, modules: set[str] | dict[str, Path]) -> str | None:
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def imports_of(source: str, module: str, is_package: bool, modules: set[str] | dict[str, Path]) -> set[str]:
    """The modules of `modules` that `source` (the module `module`) imports."""
    reader = _Imports(module if is_package else module.rpartition(".")[0])
    reader.visit(ast.parse(source))
    targets = set()
    for base, name in reader.found:
        if name is not None and f"{base}.{name}" in modules:
            targets.add(f"{base}.{name}")  # `from package import module`
        else:
            target = _longest_known_prefix(base, modules)
            if target is not None:
                targets.add(target)
    targets.discard(module)
    return targets


def import_graph() -> dict[str, set[str]]:
    modules = runtime_modules()
    return {
        name: imports_of(path.read_text(), name, path.name == "__init__.py", modules) for name, path in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan): each is a set of
    modules that import each other, directly or through the others."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


# ---------------------------------------------------------------------------------------
# The layers of section 6

CORE = "idemdash.core"
RECEIPTS = "receipts"
OUTBOX = "receipts.outbox"
WEBHOOKS = "webhooks"
WORKER = "idemdash.worker"
DASHBOARD = "idemdash.dashboard"
DEVTOOLS = "idemdash.devtools"
WIRING = "idemdash"  # settings, urls, wsgi, asgi, errors: they name the apps by string only

# What each part may import besides itself: what lies below it. Webhooks and the outbox are
# side by side (neither imports the other), as are the dashboard and the worker.
MAY_IMPORT: dict[str, set[str]] = {
    CORE: set(),
    RECEIPTS: {CORE},
    OUTBOX: {RECEIPTS, CORE},
    WEBHOOKS: {RECEIPTS, CORE},
    WORKER: {OUTBOX, RECEIPTS, CORE},
    DASHBOARD: {WEBHOOKS, OUTBOX, RECEIPTS, CORE},
    WIRING: {CORE},
    DEVTOOLS: {WIRING, DASHBOARD, WORKER, WEBHOOKS, OUTBOX, RECEIPTS, CORE},
}

# Modules that are not yet in the package section 6 puts them in, and the part each belongs
# to (a name covers its submodules). An entry goes when its module moves.
NOT_YET_MOVED: dict[str, str] = {
    # Empty since steps 3, 7 and 8: every module is in its part. A module placed outside
    # the package section 6 puts it in is listed here, with the step that moves it.
}

PARTS = (CORE, OUTBOX, RECEIPTS, WEBHOOKS, WORKER, DASHBOARD, DEVTOOLS, WIRING)

# Beside what its part may import, the project's settings read the apps' defaults
# (settings.APP_INTEGERS): the apps' `conf` modules, which import nothing but Django.
SETTINGS_READ = {("idemdash.settings", f"{app}.conf") for app in (RECEIPTS, OUTBOX, WEBHOOKS, WORKER)}


def part_of(module: str) -> str:
    moved_to = _longest_known_prefix(module, set(NOT_YET_MOVED))
    if moved_to is not None:
        return NOT_YET_MOVED[moved_to]
    part = _longest_known_prefix(module, set(PARTS))
    assert part is not None, f"{module} is in none of the parts of section 6"
    return part


def upward_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(importer, imported) for every import that crosses into a part its part may not import."""
    return {
        (module, target)
        for module, targets in graph.items()
        for target in targets
        if part_of(target) != part_of(module) and part_of(target) not in MAY_IMPORT[part_of(module)]
        and (module, target) not in SETTINGS_READ
    }


# ---------------------------------------------------------------------------------------
# Today's exceptions

KNOWN_CYCLES: set[frozenset[str]] = set()

KNOWN_UPWARD_IMPORTS: set[tuple[str, str]] = set()

KNOWN_READS_OF_TESTS: set[str] = set()


def _shown(entries: set) -> list:
    return sorted(sorted(entry) if isinstance(entry, frozenset) else entry for entry in entries)


def _only_shrinks(found: set, known: set, what: str) -> None:
    assert not found - known, f"new {what}: {_shown(found - known)}"
    assert not known - found, f"no longer {what} (delete them from the test's known list): {_shown(known - found)}"


def test_no_import_cycles_between_modules() -> None:
    _only_shrinks(cycles(import_graph()), KNOWN_CYCLES, "import cycles")


def test_the_core_imports_no_app_of_ours() -> None:
    outside = {
        (module, target)
        for module, targets in import_graph().items()
        if part_of(module) == CORE
        for target in targets
        if part_of(target) != CORE
    }
    assert not outside, f"idemdash.core must import only itself: {sorted(outside)}"


def test_dependencies_point_one_way() -> None:
    _only_shrinks(upward_imports(import_graph()), KNOWN_UPWARD_IMPORTS, "upward imports")


def test_every_module_not_yet_moved_is_still_there() -> None:
    modules = runtime_modules()
    moved = {name for name in NOT_YET_MOVED if not any(m == name or m.startswith(name + ".") for m in modules)}
    assert not moved, f"moved (delete them from NOT_YET_MOVED): {sorted(moved)}"


# A string that names the tests folder as a path: "tests" on its own (a path part, as in
# `Path(...) / "tests"`) or "tests/" within a path.
_TESTS_PATH = re.compile(r"^tests$|(^|[/\\])tests[/\\]")


def reads_of_tests(source: str) -> bool:
    tree = ast.parse(source)
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    return any(
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and _TESTS_PATH.search(node.value)
        for node in ast.walk(tree)
    )


def test_no_runtime_module_reads_tests() -> None:
    found = {name for name, path in runtime_modules().items() if reads_of_tests(path.read_text())}
    _only_shrinks(found, KNOWN_READS_OF_TESTS, "runtime modules that read tests/")


# The second distribution (clients/python, `idemdash-client`): installed without Django or
# the main package, so it may import neither; the main package imports it, not the reverse.
CLIENT = ROOT / "clients" / "python" / "idemdash_client"


def test_the_client_distribution_imports_nothing_of_the_main_one_nor_django() -> None:
    forbidden = {*PACKAGES, "django"}
    found = {}
    for path in sorted(CLIENT.rglob("*.py")):
        reader = _Imports("idemdash_client")
        reader.visit(ast.parse(path.read_text()))
        bad = sorted({base for base, _ in reader.found if base.split(".")[0] in forbidden})
        if bad:
            found[path.name] = bad
    assert len(list(CLIENT.rglob("*.py"))) >= 6 and found == {}


# ---------------------------------------------------------------------------------------
# The checks themselves can fail


def test_the_cycle_detector_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == {frozenset({"a", "b", "c"})}
    assert cycles({"a": {"b"}, "b": set()}) == set()


def test_lazy_imports_are_read() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from webhooks import models\n"
        "def later():\n"
        "    from receipts.store import claim\n"
        "    from . import conf\n"
    )
    modules = {"receipts.store", "receipts.outbox.conf", "webhooks.models", "receipts.outbox.api"}
    assert imports_of(source, "receipts.outbox.api", False, modules) == {"receipts.store", "receipts.outbox.conf"}


def test_an_upward_import_is_found() -> None:
    graph = {"receipts.store": {"webhooks.processing", "idemdash.core.audit"}, "idemdash.core.audit": set()}
    assert upward_imports(graph) == {("receipts.store", "webhooks.processing")}


def test_a_path_into_tests_is_found() -> None:
    assert reads_of_tests('FIXTURES = ROOT / "tests" / "webhooks"')
    assert reads_of_tests('open("tests/webhooks/fixtures/a.json")')
    assert not reads_of_tests('"""Checked by tests/receipts/test_store.py."""\nNAME = "attests"')
