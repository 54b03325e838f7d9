from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from idemdash.core.clients import hash_token
from idemdash.core.models import ApiClient
from receipts.models import Attempt


@pytest.mark.parametrize("url", ["http://example.com", "https://10.1.2.3:8000", "http://idemdash.internal"])
def test_it_refuses_to_drive_a_server_on_another_host(url, tmp_path):
    with pytest.raises(CommandError, match="only talks to this machine"):
        call_command("simulate", "--base-url", url, "--token-file", str(tmp_path / "t"))


@pytest.mark.parametrize("args", [["--rate", "0"], ["--rate", "lots"], ["--duration", "0"], ["--actions", "0"],
                                  ["--receiver-failures", "0.8", "--receiver-slow", "0.5"],
                                  ["--receiver-refuse", "-1"], ["--stall-lease", "0"]])
def test_it_refuses_bad_settings_before_sending_anything(args, tmp_path):
    with pytest.raises(CommandError):
        call_command("simulate", *args, "--token-file", str(tmp_path / "t"))


@pytest.mark.django_db(transaction=True)
def test_it_runs_for_the_duration_and_keeps_one_private_api_client_across_runs(live_server, tmp_path, settings):
    settings.STRIPE_WEBHOOK_SECRET = settings.SHOPIFY_WEBHOOK_SECRET = ""
    token_file = tmp_path / "simulator.token"
    args = ["--base-url", live_server.url, "--duration", "1.5", "--rate", "10", "--receiver-port", "0",
            "--token-file", str(token_file), "--seed", "3"]
    out = StringIO()
    call_command("simulate", *args, stdout=out)

    assert "simulating 10 actions/s against" in out.getvalue()
    assert "/partner/invoices refused (403) for 180 s" in out.getvalue()  # the demo's partner outage, by default
    assert "stopped. [" in out.getvalue()
    assert (token_file.stat().st_mode & 0o777) == 0o600
    client = ApiClient.objects.get()
    assert client.name == "simulator"
    assert client.token_hash == hash_token(token_file.read_text().strip())
    first_run = Attempt.objects.count()
    assert first_run > 0

    call_command("simulate", *args, stdout=StringIO())
    assert ApiClient.objects.count() == 1  # the kept token still works: no new client
    assert Attempt.objects.count() > first_run


@pytest.mark.django_db(transaction=True)
def test_a_lost_token_file_gets_a_new_client_beside_the_old_one(live_server, tmp_path, settings):
    settings.STRIPE_WEBHOOK_SECRET = settings.SHOPIFY_WEBHOOK_SECRET = ""
    ApiClient.objects.create(name="simulator", token_prefix="idem_x", token_hash="0" * 64)
    token_file = tmp_path / "simulator.token"
    call_command("simulate", "--base-url", live_server.url, "--duration", "0.5", "--receiver-port", "0",
                 "--token-file", str(token_file), stdout=StringIO())
    new = ApiClient.objects.exclude(name="simulator").get()
    assert new.name.startswith("simulator-")
    assert new.token_hash == hash_token(token_file.read_text().strip())
