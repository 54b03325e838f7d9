from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules

from idemdash.core.appconfig import BigIntegerIds


class OutboxConfig(BigIntegerIds, AppConfig):
    name = "receipts.outbox"
    label = "outbox"
    verbose_name = "Outbox"

    def ready(self) -> None:
        # Built-in actions first, then each installed app's `outbox_actions` module, so a
        # project registers its own actions by writing `<app>/outbox_actions.py`.
        from idemdash.core.masking import mask_logger
        from receipts.outbox import actions  # noqa: F401

        autodiscover_modules("outbox_actions")
        # http.post's client logs every request's URL at INFO: its userinfo masked, in the
        # host project's logs too, whatever their handlers.
        mask_logger("httpx")
