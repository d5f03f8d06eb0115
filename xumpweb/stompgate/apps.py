from django.apps import AppConfig


class StompgateConfig(AppConfig):
    name = "xumpweb.stompgate"
    verbose_name = "STOMP gateway"
