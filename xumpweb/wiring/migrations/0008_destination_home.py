# Destinations' homes, recorded and kept (SPEC §10, xumpweb/shards.py, docs/scaling.md)

from django.conf import settings
from django.db import migrations, models
from django.db.models import Q

from engine.placement import place


def record_homes(apps, schema_editor):
    """The home of every destination a selector DELIVERs to by name, as it was read until
    now: the shard of the queue of its name; else the one shard whose queues' selectors
    deliver to it (a DELIVER was made only where its destination was read, or into a queue
    of its name there); else placement over the shards the data was made with, which the
    wiring records as the stores the routers opened (`XUMP_STORE`, `XUMP_STORE-1`, ...;
    XUMP_SHARDS may say more by now), so shard 0 when it records none."""
    Store = apps.get_model("wiring", "Store")
    Queue = apps.get_model("wiring", "Queue")
    Selector = apps.get_model("wiring", "Selector")
    DestinationHome = apps.get_model("wiring", "DestinationHome")
    main = settings.XUMP_STORE
    numbers = [
        int(name[len(main) + 1 :])
        for name in Store.objects.values_list("name", flat=True)
        if name.startswith(f"{main}-") and name[len(main) + 1 :].isdigit()
    ]
    shards = [main] + [f"{main}-{n}" for n in range(1, max(numbers, default=0) + 1)]
    queues = dict(Queue.objects.values_list("name", "store__name"))
    rows = Selector.objects.filter(action="deliver", target__gt="").filter(
        Q(target_from__isnull=True) | Q(target_from="")
    )
    delivering = {}
    for destination, store in rows.values_list("target", "queue__store__name"):
        delivering.setdefault(destination, set()).add(store)
    homes = {}

    def where(name):
        return queues.get(name) or homes.get(name)

    for destination in sorted(delivering):  # an owner before its `owner:name`s
        local = delivering[destination] & set(shards)
        if where(destination) is not None:
            homes[destination] = where(destination)
        elif len(local) == 1:
            [homes[destination]] = local
        else:
            homes[destination] = place(destination, shards, store_of=where)
    DestinationHome.objects.bulk_create(
        [DestinationHome(destination=name, store=store) for name, store in homes.items()]
    )


class Migration(migrations.Migration):

    dependencies = [
        ("wiring", "0007_selector_conditions_target_from"),
    ]

    operations = [
        migrations.CreateModel(
            name="DestinationHome",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("destination", models.CharField(max_length=200, unique=True)),
                ("store", models.CharField(help_text="the shard its subscribers read", max_length=200)),
                ("created", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "ordering": ["destination"],
            },
        ),
        migrations.RunPython(record_homes, migrations.RunPython.noop),
    ]
