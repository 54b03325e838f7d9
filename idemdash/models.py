from __future__ import annotations

from django.db import models


class Dashboard(models.Model):
    """Holds the dashboard's permissions; no table.

    Permissions hang off a content type, and the receipts/webhooks models belong to other
    apps, so the two access levels live on this model-less anchor instead.
    """

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [
            ("view_dashboard", "Can see every dashboard page and figure"),
            ("operate", "Can retry, release and bulk-retry from the dashboard"),
        ]
