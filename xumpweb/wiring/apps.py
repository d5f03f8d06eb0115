from django.apps import AppConfig


class WiringConfig(AppConfig):
    name = "xumpweb.wiring"
    verbose_name = "Xump wiring"
