from typing import Any

from django.apps import AppConfig
from django.core import checks


class WiringConfig(AppConfig):
    name = "xumpweb.wiring"
    verbose_name = "Xump wiring"


@checks.register(checks.Tags.database)
def homes_in_use(databases: Any = None, **_: Any) -> list[checks.CheckMessage]:
    """A shard removed (XUMP_SHARDS lowered) must be empty: no destination may be read on
    it (xumpweb/shards.py), as no queue may live on it (router/apps.py). Runs with
    `manage.py migrate` and `check --database`."""
    if not databases:
        return []
    from django.conf import settings
    from django.db import DatabaseError

    from xumpweb import shards

    try:
        left = shards.homes_beyond()
    except DatabaseError:  # not migrated yet: no home recorded anywhere
        return []
    if not left:
        return []
    read = ", ".join(f"{store} ({count} destination(s))" for store, count in left.items())
    return [checks.Error(
        f"XUMP_SHARDS={settings.XUMP_SHARDS} leaves out shards that destinations are read "
        f"on: {read}; set XUMP_SHARDS back, or delete the selectors that deliver to them "
        "first (a shard removed must be empty)",
        id="xump.E002",
    )]  # fmt: skip
