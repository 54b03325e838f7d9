"""The runtime never reaches into the developer tooling or the tests: no module outside
idemdash/devtools/ imports it (lazy imports included) or names it by dotted path, and none
names a path under tests/. So leaving idemdash/devtools/ out of the wheel loses nothing."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEVTOOLS = ROOT / "idemdash" / "devtools"


def runtime_modules() -> list[Path]:
    return sorted(
        path
        for package in ("idemdash", "receipts", "webhooks")
        for path in (ROOT / package).rglob("*.py")
        if DEVTOOLS not in path.parents
    )


def imported_names(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def strings(tree: ast.AST) -> set[str]:
    """The string constants of a module, docstrings aside (they may name anything)."""
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    }


def names_devtools(name: str) -> bool:
    return name == "idemdash.devtools" or name.startswith("idemdash.devtools.")


def names_tests(text: str) -> bool:
    parts = text.replace("\\", "/").split("/")
    return "tests" in parts or text.startswith("tests.")


def test_the_scan_sees_the_runtime_and_what_it_looks_for():
    modules = {path.relative_to(ROOT).as_posix() for path in runtime_modules()}
    assert {"idemdash/settings.py", "idemdash/dashboard/views/receipts.py", "receipts/store.py", "webhooks/apps.py"} <= modules
    assert not any(m.startswith("idemdash/devtools/") for m in modules)
    assert names_devtools("idemdash.devtools.demo") and not names_devtools("idemdash.devtoolsmith")
    assert names_tests("tests/webhooks/fixtures") and names_tests("tests.settings") and not names_tests("contests")


def test_no_runtime_module_imports_or_names_the_devtools():
    found = []
    for path in runtime_modules():
        tree = ast.parse(path.read_text(), filename=str(path))
        found += [f"{path.relative_to(ROOT)}: import {name}" for name in imported_names(tree) if names_devtools(name)]
        found += [f"{path.relative_to(ROOT)}: {text!r}" for text in strings(tree) if names_devtools(text)]
    assert found == []


def test_no_runtime_module_reads_the_tests():
    found = []
    for path in runtime_modules():
        tree = ast.parse(path.read_text(), filename=str(path))
        found += [f"{path.relative_to(ROOT)}: import {name}" for name in imported_names(tree) if name.split(".")[0] == "tests"]
        found += [f"{path.relative_to(ROOT)}: {text!r}" for text in strings(tree) if names_tests(text)]
    assert found == []
