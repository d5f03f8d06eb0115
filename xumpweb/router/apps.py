from django.apps import AppConfig


class RouterConfig(AppConfig):
    name = "xumpweb.router"
    verbose_name = "Xump router"

    def ready(self) -> None:
        # a router (runtime.py) counts its steps and leases for /metrics with metrics.py's
        # counters, handed in here: runtime.py is below metrics.py and does not import it
        from xumpweb import metrics, runtime

        runtime.count_with(metrics.router_step, metrics.lease_taken)
