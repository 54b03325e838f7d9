from pathlib import Path

from django.contrib.staticfiles import finders


def test_plotly_js_is_found_under_static_vendor_from_the_installed_package():
    found = finders.find("vendor/plotly.min.js")
    assert found and Path(found).name == "plotly.min.js"
    assert "plotly.js v" in Path(found).read_text(errors="ignore")[:200]


def test_nothing_else_from_plotlys_package_data_is_exposed():
    assert not finders.find("vendor/widgetbundle.js")


def test_collectstatic_would_copy_it_to_vendor(settings, tmp_path):
    from django.core.management import call_command

    settings.STATIC_ROOT = tmp_path
    call_command("collectstatic", "--noinput", verbosity=0)
    assert (tmp_path / "vendor" / "plotly.min.js").is_file()
