"""README.md and the pages under docs/: the README stays a front door, every relative link and
anchor between the pages resolves, each page opens with its summary and a way back, the
examples are valid Python that imports what exists, every environment variable the settings
read is documented, and every code reference (`path:function`), in the pages and in the code's
comments and docstrings, names what exists. Anchors are
GitHub's: the heading in lower case, punctuation dropped, spaces as hyphens, and -1, -2 ...
for a repeated heading."""

from __future__ import annotations

import ast
import functools
import importlib
import os
import re
import textwrap
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

import idemdash.settings as idemdash_settings

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").rglob("*.md"))
DOCUMENTS = [README, *PAGES]
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`[^`]*`")


def prose_lines(path: Path) -> Iterator[str]:
    """The lines outside fenced code blocks (indented blocks hold no `#` headings or links)."""
    fenced = False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            yield line


def fenced_blocks(path: Path, language: str) -> list[str]:
    found = re.findall(rf"^([ \t]*)```{language}\n(.*?)^\1```", path.read_text(), re.M | re.S)
    return [textwrap.dedent(code) for _, code in found]


def slug(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    repeats: dict[str, int] = {}
    for line in prose_lines(path):
        heading = re.match(r"#{1,6} (.*)", line)
        if heading:
            base = slug(heading.group(1))
            n = repeats[base] = repeats.get(base, -1) + 1
            found.add(f"{base}-{n}" if n else base)
    return found


def relative_links(path: Path) -> list[str]:
    return [
        target
        for line in prose_lines(path)
        for target in LINK.findall(CODE_SPAN.sub("", line))
        if not re.match(r"[a-z]+:", target)
    ]


def test_the_readme_is_a_front_door_of_at_most_300_lines():
    assert len(README.read_text().splitlines()) <= 300


def test_the_architecture_page_is_a_map_of_at_most_400_lines():
    assert len((ROOT / "docs" / "architecture.md").read_text().splitlines()) <= 400


def test_every_page_can_be_reached_from_the_readme():
    reached, todo = {README}, [README]
    while todo:
        page = todo.pop()
        for target in relative_links(page):
            linked = (page.parent / target.partition("#")[0]).resolve()
            if linked.suffix == ".md" and linked.exists() and linked not in reached:
                reached.add(linked)
                todo.append(linked)
    assert set(PAGES) - reached == set(), "pages no link leads to"


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_and_anchor_resolves(path):
    broken = []
    for target in relative_links(path):
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no such heading in {linked.relative_to(ROOT)}")
    assert broken == []


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_page_opens_with_its_summary_and_a_way_back(path):
    blocks = re.split(r"\n\s*\n", path.read_text().strip())
    assert blocks[0].startswith("# ") and "\n" not in blocks[0], "a title first"
    summary = blocks[1]
    assert not summary.startswith(("#", "-", "|", "```", "    ", "<!--")), "then a paragraph"
    readme = Path("..", *[".."] * (len(path.relative_to(ROOT / "docs").parts) - 1), "README.md")
    assert f"]({readme.as_posix()})" in blocks[2], "then a link back to the README"


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_python_example_is_valid_python(path):
    for code in fenced_blocks(path, "python"):
        ast.parse(code)


def test_the_readme_examples_import_what_exists():
    for code in fenced_blocks(README, "python"):
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.ImportFrom) and node.module.split(".")[0] in ("idemdash", "receipts", "webhooks", "idemdash_client"):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{node.module}.{alias.name}"


def test_every_environment_variable_the_settings_read_is_documented():
    source = (ROOT / "idemdash" / "settings.py").read_text()
    read = set(re.findall(r"""(?:env\w*|environ\.get|getenv)\(\s*["']([A-Z][A-Z0-9_]+)["']""", source))
    # The apps' integer settings are read from the environment through one table.
    read |= {idemdash_settings.ENVIRONMENT_NAMES.get(name, name) for name in idemdash_settings.APP_INTEGERS}
    assert {"RETENTION_BATCH_SIZE", "OUTBOX_MAX_ATTEMPTS"} <= read
    assert {"DATABASE_URL", "SECRET_KEY", "OUTBOX_HTTP_ALLOWED_HOSTS"} <= read  # the scan finds them
    documented = "\n".join(path.read_text() for path in DOCUMENTS)
    assert {name for name in read if not re.search(rf"\b{name}\b", documented)} == set()


# --- code references: `path`, `path:name`, `path:Class.member` -------------------------------

CODE_REF = re.compile(
    r"`((?:[\w.-]+/)+[\w.-]+\.(?:py|html|md|json|js|ts|css|toml)\b)(?::([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?))?"
)
# Written when the service or the bench runs, not kept in the repository.
GENERATED = ("var/", "static/vendor/")


def top_level_names(source: str) -> dict[str, set[str]]:
    """Each name a module defines at its top level (functions, classes, assignments, imports),
    with a class's own members."""
    names: dict[str, set[str]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = {
                target.id if isinstance(member, (ast.Assign, ast.AnnAssign)) else member.name
                for member in node.body
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                or isinstance(member, (ast.Assign, ast.AnnAssign))
                for target in (getattr(member, "targets", None) or [getattr(member, "target", member)])
                if not isinstance(member, (ast.Assign, ast.AnnAssign)) or isinstance(target, ast.Name)
            }
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = set()
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in getattr(node, "targets", None) or [node.target]:
                names.update({n.id: set() for n in ast.walk(target) if isinstance(n, ast.Name)})
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update({(alias.asname or alias.name).split(".")[0]: set() for alias in node.names})
    return names


def resolve(reference: str, page: Path, tracked: list[str]) -> Path | None:
    """The file a reference names: from the top of the repository, from the page's folder, or,
    inside a package's listing (`management/commands/qcluster.py`), the one file ending so."""
    for candidate in (ROOT / reference, page.parent / reference):
        if candidate.is_file():
            return candidate
    ending = [name for name in tracked if name.endswith("/" + reference)]
    return ROOT / ending[0] if len(ending) == 1 else None


@functools.cache
def repository_files() -> list[str]:
    # Walked with the skipped folders pruned, not filtered after: .venv alone holds tens of
    # thousands of files.
    skipped = {".venv", ".git", "var", "node_modules", "__pycache__"}
    found = []
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [name for name in subfolders if name not in skipped]
        found += [str(Path(folder, name).relative_to(ROOT)) for name in files]
    return found


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_code_reference_names_what_exists(path):
    # docs/architecture.md promises that every `path:function` it names exists: this holds
    # every page to it, so that a rename without the page's update fails here.
    tracked = repository_files()
    missing = []
    for reference, name in CODE_REF.findall(path.read_text()):
        if reference.startswith(GENERATED):
            continue
        found = resolve(reference, path, tracked)
        if found is None:
            missing.append(reference)
        elif name and found.suffix == ".py":
            head, _, member = name.partition(".")
            names = top_level_names(found.read_text())
            if head not in names or (member and member not in names[head]):
                missing.append(f"{reference}:{name}")
    assert missing == []


# A pointer in a comment or docstring: a path to a Python file, maybe with `:name`, not part of
# a longer path or URL.
COMMENT_REF = re.compile(r"(?<![\w/.-])((?:[\w-]+/)+[\w-]+\.py)(?::([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?))?")


def comments_and_docstrings(source: str) -> Iterator[str]:
    for token in tokenize.generate_tokens(iter(source.splitlines(keepends=True)).__next__):
        if token.type == tokenize.COMMENT:
            yield token.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            yield ast.get_docstring(node, clean=False) or ""


def test_every_code_reference_in_a_comment_or_docstring_names_what_exists():
    # The same promise for the code's own pointers ("see receipts/store.py:claim"): a rename or
    # a move that leaves one pointing nowhere fails here.
    tracked = repository_files()
    missing = []
    for name in tracked:
        if not name.endswith(".py") or name.startswith("tests/packaging/drf_host/"):
            continue
        path = ROOT / name
        for text in comments_and_docstrings(path.read_text()):
            for reference, member in COMMENT_REF.findall(text):
                found = resolve(reference, path, tracked)
                if found is None:
                    missing.append(f"{name}: {reference}")
                elif member:
                    head, _, attribute = member.partition(".")
                    names = top_level_names(found.read_text())
                    if head not in names or (attribute and attribute not in names[head]):
                        missing.append(f"{name}: {reference}:{member}")
    assert missing == []


def test_every_module_docstring_is_at_most_ten_lines():
    # A module docstring says what the module is for and the one or two things a reader must
    # know first: what explains one function belongs in that function's docstring, and an
    # essay in docs/.
    too_long = []
    for name in repository_files():
        if not name.endswith(".py") or not name.startswith(("receipts/", "webhooks/", "idemdash/", "clients/python/")):
            continue
        if "/migrations/" in name:
            continue
        docstring = ast.get_docstring(ast.parse((ROOT / name).read_text()), clean=False) or ""
        lines = docstring.count("\n") + 1
        if docstring and lines > 10:
            too_long.append(f"{name}: {lines} lines")
    assert too_long == []


def test_a_stale_code_reference_is_caught():
    names = top_level_names((ROOT / "receipts" / "store.py").read_text())
    assert "claim" in names and "no_such_function" not in names
    assert "DoesNotExist" not in names["ClaimResult"] and "receipt" in names["ClaimResult"]
    assert resolve("no/such/module.py", README, []) is None
    pointers = COMMENT_REF.findall("# see receipts/store.py:claim and https://x.org/a/b.py, and docs/a.md")
    assert pointers == [("receipts/store.py", "claim")]


def _calls_passing(path: str, function: str, name: str) -> set[str]:
    """The callees (as written) that `function` of `path` passes its `name` to, by value."""
    tree = ast.parse((ROOT / path).read_text())
    found = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    return {
        ast.unparse(call.func)
        for call in ast.walk(found)
        if isinstance(call, ast.Call)
        and any(isinstance(arg, ast.Name) and arg.id == name for arg in [*call.args, *(k.value for k in call.keywords)])
    }


def test_the_keys_route_is_the_one_the_architecture_page_walks():
    # docs/architecture.md, 3.1 step 5: `_handle` -> `store.claim` -> `store._claiming` ->
    # `waiting.subscription`; what an owner does next it does with the Held, not the key.
    assert _calls_passing("receipts/decorators.py", "_handle", "key") == {"store.claim"}
    assert _calls_passing("receipts/store.py", "claim", "key") == {"_claiming"}
    assert _calls_passing("receipts/store.py", "_claiming", "key") == {"_Intent", "waiting.subscription", "Receipt.objects.filter"}
    route = "`_handle` → `store.claim` → `store._claiming` → `receipts/waiting.py:subscription`"
    assert route in (ROOT / "docs" / "architecture.md").read_text()
