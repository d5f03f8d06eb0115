from django.apps import AppConfig
from django.db.models.signals import m2m_changed, post_delete, post_save


class ApiConfig(AppConfig):
    name = "xumpweb.api"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.contrib.auth.models import Group

        from xumpweb.api.auth import forget_roles, forget_tokens
        from xumpweb.wiring.models import ApiToken, QueueGrant

        post_save.connect(forget_tokens, sender=ApiToken, dispatch_uid="xump-forget-tokens")
        post_delete.connect(forget_tokens, sender=ApiToken, dispatch_uid="xump-forget-tokens-d")
        # what a token or an open WebSocket may do follows its owner's role (access.py)
        user = get_user_model()
        for signal, sender in [
            (post_save, user), (post_delete, user), (post_save, QueueGrant),
            (post_delete, QueueGrant), (post_delete, Group),
            (m2m_changed, user.groups.through), (m2m_changed, user.user_permissions.through),
            (m2m_changed, Group.permissions.through),
        ]:  # fmt: skip
            signal.connect(forget_roles, sender=sender, dispatch_uid=f"xump-roles-{id(sender)}-"
                           f"{id(signal)}")  # fmt: skip
