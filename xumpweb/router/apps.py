from typing import Any

from django.apps import AppConfig
from django.core import checks


class RouterConfig(AppConfig):
    name = "xumpweb.router"
    verbose_name = "Xump router"

    def ready(self) -> None:
        # a router (runtime.py) counts its steps and leases for /metrics with metrics.py's
        # counters, handed in here: runtime.py is below metrics.py and does not import it
        from xumpweb import metrics, runtime

        runtime.count_with(metrics.router_step, metrics.lease_taken)


@checks.register(checks.Tags.database)
def shards_in_use(databases: Any = None, **_: Any) -> list[checks.CheckMessage]:
    """A shard removed (XUMP_SHARDS lowered) must be empty: its queues would never route.
    Runs with `manage.py migrate` (which `make run` starts with) and `check --database`."""
    if not databases:
        return []
    from django.conf import settings
    from django.db import DatabaseError

    from xumpweb import shards

    try:
        left = shards.beyond()
    except DatabaseError:  # not migrated yet: nothing placed anywhere
        return []
    if not left:
        return []
    held = ", ".join(f"{store} ({count} queue(s))" for store, count in left.items())
    return [checks.Error(
        f"XUMP_SHARDS={settings.XUMP_SHARDS} leaves out shards that hold queues: {held}; set "
        "XUMP_SHARDS back, or delete those queues first (a shard removed must be empty)",
        id="xump.E001",
    )]  # fmt: skip
