from __future__ import annotations

from io import StringIO

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django_q.models import Schedule

from idemdash.core.schedules import Declared, declared_schedules, install_schedules, this_cluster

pytestmark = pytest.mark.django_db


def test_every_app_declares_its_periodic_work():
    names = {entry["name"] for entry in declared_schedules().schedules}
    assert {"outbox.drain", "receipts.purge", "receipts.rollup"} <= names


def declared_names() -> set[str]:
    return {entry["name"] for entry in declared_schedules().schedules}


def test_migrate_installs_every_declared_schedule_with_no_other_step():
    # The test database was made by migrate alone.
    assert set(Schedule.objects.values_list("name", flat=True)) >= declared_names()
    Schedule.objects.filter(name="outbox.drain").delete()
    Schedule.objects.filter(name="receipts.purge").update(func="receipts.tasks.roll_up")
    call_command("migrate", verbosity=0)
    assert Schedule.objects.get(name="outbox.drain").func == "receipts.outbox.tasks.drain"
    assert Schedule.objects.get(name="receipts.purge").func == "receipts.tasks.purge"
    assert all(Schedule.objects.filter(name=name).count() == 1 for name in declared_names())


def test_migrate_points_a_schedule_whose_task_path_changed_at_the_declared_one():
    Schedule.objects.filter(name="idemdash_dashboard.alerts").update(func="idemdash.tasks.evaluate_alerts")
    call_command("migrate", verbosity=0)
    assert Schedule.objects.get(name="idemdash_dashboard.alerts").func == "idemdash.dashboard.tasks.evaluate_alerts"


def test_installing_twice_leaves_one_of_each_and_changes_nothing_the_second_time():
    Schedule.objects.all().delete()
    first = install_schedules()
    declared = declared_names()
    assert set(first.created) == declared
    snapshot = list(Schedule.objects.order_by("name").values())
    second = install_schedules()
    assert (second.created, second.updated, second.removed) == ([], [], [])
    assert list(Schedule.objects.order_by("name").values()) == snapshot
    for name in declared:
        assert Schedule.objects.filter(name=name).count() == 1
    drain = Schedule.objects.get(name="outbox.drain")
    assert (drain.func, drain.schedule_type, drain.minutes) == ("receipts.outbox.tasks.drain", "I", 1)


def test_a_changed_declaration_updates_its_schedule():
    install_schedules()
    declared = declared_schedules()
    for entry in declared.schedules:
        if entry["name"] == "outbox.drain":
            entry["minutes"] = 5
    result = install_schedules(declared)
    assert result.updated == ["outbox.drain"]
    assert Schedule.objects.get(name="outbox.drain").minutes == 5


def test_a_schedule_no_longer_declared_is_removed_but_an_operators_own_is_kept():
    Schedule.objects.create(name="outbox.retired", func="receipts.outbox.tasks.drain")
    Schedule.objects.create(name="nightly-report", func="receipts.tasks.purge")
    Schedule.objects.create(name="receipts.purge", func="receipts.tasks.purge")  # a hand-made
    Schedule.objects.create(name="receipts.purge", func="receipts.tasks.purge")  # duplicate pair
    result = install_schedules()
    assert "outbox.retired" in result.removed
    assert not Schedule.objects.filter(name="outbox.retired").exists()
    assert Schedule.objects.filter(name="nightly-report").exists()
    assert Schedule.objects.filter(name="receipts.purge").count() == 1


@pytest.mark.parametrize(
    "entry",
    [
        {"name": "elsewhere.job", "func": "receipts.tasks.purge"},
        {"name": "outbox.typo", "func": "receipts.tasks.no_such_task"},
    ],
)
def test_a_bad_declaration_fails_loudly(monkeypatch, entry):
    from receipts.outbox import schedules

    monkeypatch.setattr(schedules, "SCHEDULES", [*schedules.SCHEDULES, entry])
    with pytest.raises(ImproperlyConfigured):
        declared_schedules()


def test_the_command_installs_and_reports():
    Schedule.objects.all().delete()
    out = StringIO()
    call_command("install_schedules", stdout=out)
    assert "created:" in out.getvalue() and "outbox.drain" in out.getvalue()
    out = StringIO()
    call_command("install_schedules", stdout=out)
    assert "created" not in out.getvalue() and "unchanged:" in out.getvalue()


def test_an_empty_declaration_installs_nothing():
    assert install_schedules(Declared()).created == []


# --- two clusters on one schedule table (idemdash's server beside a host's worker) -----------


@pytest.fixture
def service_cluster(monkeypatch):
    """This process as idemdash's server beside a host: a cluster_name other than its name."""
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "CLUSTER_NAME", "idemdash-service")
    return Conf


def test_a_cluster_named_apart_installs_its_own_copy_and_leaves_the_others_alone(service_cluster):
    """idemdash's server beside a host: the host's migrate made the schedules that name no
    cluster (its own and those of the idemdash apps it has too); the service's adds its own copy
    of each it declares, naming its cluster. django-q2 runs each copy in its own cluster only."""
    host = {(s.name, s.cluster, s.minutes) for s in Schedule.objects.all()}  # migrate's, naming none
    Schedule.objects.create(name="outbox.hosts", func="receipts.outbox.tasks.drain")  # under a declared prefix
    assert this_cluster() == "idemdash-service"
    result = install_schedules()
    assert set(result.created) == declared_names() and result.removed == []
    assert {(s.name, s.cluster, s.minutes) for s in Schedule.objects.filter(cluster__isnull=True)} == host | {
        ("outbox.hosts", None, None)}
    assert set(Schedule.objects.filter(cluster="idemdash-service").values_list("name", flat=True)) == declared_names()
    assert install_schedules().unchanged and not install_schedules().created

    # The host's next migrate, with another version of the shared apps, changes only its own.
    service_cluster.CLUSTER_NAME = service_cluster.PREFIX
    assert this_cluster() is None
    declared = declared_schedules()
    for entry in declared.schedules:
        if entry["name"] == "outbox.drain":
            entry["minutes"] = 5
    result = install_schedules(declared)
    assert result.updated == ["outbox.drain"] and result.removed == ["outbox.hosts"]
    assert Schedule.objects.get(name="outbox.drain", cluster__isnull=True).minutes == 5
    assert Schedule.objects.get(name="outbox.drain", cluster="idemdash-service").minutes == 1
    assert set(Schedule.objects.filter(cluster="idemdash-service").values_list("name", flat=True)) == declared_names()
