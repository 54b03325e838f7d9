"""What a host project names from before the dashboard moved into idemdash/dashboard/ keeps
working for one release: its INSTALLED_APPS entry "idemdash" and the Plotly finder's path."""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import import_string

from idemdash.dashboard.vendor import PlotlyFinder


def test_a_host_naming_idemdash_in_installed_apps_still_gets_the_dashboard_under_its_label():
    config = AppConfig.create("idemdash")
    assert (config.name, config.label) == ("idemdash.dashboard", "idemdash")


def test_the_plotly_finder_is_still_found_under_its_old_path():
    assert import_string("idemdash.vendor.PlotlyFinder") is PlotlyFinder
