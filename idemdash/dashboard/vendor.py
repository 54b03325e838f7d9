"""Serves plotly.js from the installed `plotly` package as static/vendor/plotly.min.js.

Not committed and not copied by hand: the file (4.8 MB) is whatever the installed plotly
ships (plotly 7.1 -> plotly.js 4.1.1), so the Python figures and the JavaScript that draws
them always come from the same release. `collectstatic` copies it like any other file."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PACKAGE_DATA = Path(plotly.__file__).resolve().parent / "package_data"
PREFIX = "vendor"
FILES = {"plotly.min.js"}


class PlotlyFinder(BaseFinder):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=PACKAGE_DATA)
        self.storage.prefix = PREFIX  # collectstatic places files under the storage prefix

    def check(self, **kwargs: Any) -> list:
        return []

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> str | list[str]:
        find_all = find_all or kwargs.get("all", False)
        prefix, _, name = path.partition("/")
        if prefix == PREFIX and name in FILES and (PACKAGE_DATA / name).is_file():
            match = str(PACKAGE_DATA / name)
            return [match] if find_all else match
        return []  # what every Django finder returns for "not here"

    def list(self, ignore_patterns: Any) -> Iterator[tuple[str, FileSystemStorage]]:
        for name in sorted(FILES):
            yield name, self.storage
