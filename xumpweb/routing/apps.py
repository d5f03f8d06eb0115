from django.apps import AppConfig


class RoutingConfig(AppConfig):
    name = "xumpweb.routing"
    verbose_name = "Xump routing"
