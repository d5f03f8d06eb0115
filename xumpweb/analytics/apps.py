from django.apps import AppConfig


class AnalyticsConfig(AppConfig):
    name = "xumpweb.analytics"
    label = "analytics"
    verbose_name = "Analytics"
