from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save


class ApiConfig(AppConfig):
    name = "xumpweb.api"

    def ready(self) -> None:
        from xumpweb.api.auth import forget_tokens
        from xumpweb.wiring.models import ApiToken

        post_save.connect(forget_tokens, sender=ApiToken, dispatch_uid="xump-forget-tokens")
        post_delete.connect(forget_tokens, sender=ApiToken, dispatch_uid="xump-forget-tokens-d")
