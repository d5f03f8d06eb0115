from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "xumpweb.console"
    label = "console"
