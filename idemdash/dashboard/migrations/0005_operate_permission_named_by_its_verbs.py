from django.db import migrations

OLD = "Can retry, release and bulk-retry from the dashboard"
NEW = "Can release, reprocess, send now and send again, one by one or in bulk, from the dashboard"


def _rename(old: str, new: str):
    # post_migrate creates missing permissions but never renames existing ones, so the
    # stored name (shown in the admin's group and user forms) is updated here.
    def rename(apps, schema_editor) -> None:
        Permission = apps.get_model("auth", "Permission")
        Permission.objects.using(schema_editor.connection.alias).filter(
            content_type__app_label="idemdash", content_type__model="dashboard", codename="operate", name=old
        ).update(name=new)

    return rename


class Migration(migrations.Migration):

    dependencies = [
        ("idemdash", "0004_demo_switch"),
        ("auth", "0001_initial"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="dashboard",
            options={
                "default_permissions": (),
                "managed": False,
                "permissions": [
                    ("view_dashboard", "Can see every dashboard page and figure"),
                    ("operate", NEW),
                ],
            },
        ),
        migrations.RunPython(_rename(OLD, NEW), _rename(NEW, OLD)),
    ]
