"""The recipes of docs/agents-and-workers.md (its code blocks marked `<!-- recipe:NAME -->`),
run as written by the tests that prove them, so the page cannot drift from what works."""

from __future__ import annotations

import sys
import types
from typing import Any

from tests.packaging.host import marked_blocks

RECIPES = marked_blocks("agents-and-workers.md", "recipe")


def recipe(name: str, **services: Any) -> types.ModuleType:
    """The recipe `name` run as a module, with `services` for the names it leaves to the
    application (the email provider, the CRM)."""
    _, code = RECIPES[name]
    module = types.ModuleType(f"recipe_{name}")
    module.__dict__.update(services)
    # Registered while it runs: dataclasses looks its class's module up there.
    sys.modules[module.__name__] = module
    try:
        exec(compile(code, f"docs/agents-and-workers.md (recipe:{name})", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return module
