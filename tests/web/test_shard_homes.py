"""A destination's home (SPEC §10, docs/scaling.md "Consumers", xumpweb/shards.py): the
shard its subscribers read is decided when a DELIVER to it is first made, kept in the
wiring, and stays there when shards are added, as a queue's shard does.

The service with worker routing over one redis-server, restarted with more shards; the
home rule itself and the migration that recorded the homes of the wiring made before,
in Django processes of their own (the test process never sets Django up)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import redis

from engine.placement import place
from tests.web.conftest import _answers, _serve, django_script, start_service, unique, wait_for
from tests.web.test_subscribe import send, silent, subscribe, take

WITHIN = 120.0


def shard_names(store: str, count: int) -> list[str]:
    return [store] + [f"{store}-{n}" for n in range(1, count)]


def fresh(prefix: str, wanted: Callable[[str], bool]) -> str:
    """A name no other test uses that `wanted` accepts."""
    return next(name for name in (unique(prefix) for _ in itertools.count()) if wanted(name))


def moved_by_more_shards(home: str, before: list[str], after: list[str], prefix: str) -> str:
    """A fresh name that placement puts on `home` over `before` and elsewhere over
    `after`: a destination whose home adding shards would move."""
    return fresh(prefix, lambda n: place(n, before) == home and place(n, after) != home)


def restart(service, **settings: str) -> None:
    """Stop the web process and the worker, start them again with these settings."""
    service.stop("worker")
    service.stop("server")
    service.env.update(settings)
    port = int(service.url.rsplit(":", 1)[1])
    log = Path(service.env["XUMP_TEST_DIR"]) / "server.log"
    service.processes["server"] = _serve(service.env, port, log)
    assert _answers(service.url, service.processes["server"], within=WITHIN)
    service.start_worker()


def test_a_destination_keeps_its_home_when_shards_are_added(redis_server, tmp_path):
    """docs/scaling.md: "adding shards later moves nothing". A DELIVER to a destination
    with no queue of its name, made on 2 shards, delivers on 4 as before: its subscriber
    reads what was waiting and what came after, each once; nothing is dead-lettered and
    nothing is left in any shard's outbox. (Before, the home moved where placement over 4
    puts the name: what waited stayed in the old outbox, and what came after was
    dead-lettered `no-target`.)"""
    service = start_service(redis_server.url, tmp_path, "worker", XUMP_SHARDS="2")
    client = redis.Redis.from_url(redis_server.url)
    try:
        service.start_worker()
        store = service.env["XUMP_STORE"]
        two, four = shard_names(store, 2), shard_names(store, 4)
        queue, dead = unique("orders"), unique("dlq")
        home = place(queue, two)
        destination = moved_by_more_shards(home, two, four, "d")
        with service.client() as http:
            assert http.post("/api/queues", json={"name": dead}).status_code == 201
            made = http.post("/api/queues", json={"name": queue, "dead_letter": dead})
            assert made.status_code == 201 and made.json()["store"] == home, made.text
            selector = http.post(f"/api/queues/{queue}/selectors", json={
                "when": "always", "action": "deliver", "target": destination,
                "enabled": True})  # fmt: skip
            assert selector.status_code == 201, selector.text
            for n in range(5):
                assert http.post(f"/api/queues/{queue}/publish",
                                 json={"body": f"before-{n}"}).status_code == 202  # fmt: skip
            assert wait_for(lambda: http.get(f"/api/queues/{queue}/stats").json()["delivered"]
                            == 5, within=WITHIN)  # fmt: skip

        restart(service, XUMP_SHARDS="4")
        with service.client() as http:
            for n in range(5):
                assert http.post(f"/api/queues/{queue}/publish",
                                 json={"body": f"after-{n}"}).status_code == 202  # fmt: skip
            expected = [f"before-{n}" for n in range(5)] + [f"after-{n}" for n in range(5)]
            with subscribe(service, destination) as socket:
                send(socket, {"type": "credit", "n": 100})
                try:
                    got = take(socket, len(expected), within=60)
                except TimeoutError:
                    got = []
                send(socket, {"type": "ack", "tags": [delivery["tag"] for delivery in got]})
                assert silent(socket, 1.0)  # nothing more: none twice
                stats = http.get(f"/api/queues/{queue}/stats").json()
                assert [d["message"]["body"] for d in got] == expected, (stats, got)
                settled = wait_for(lambda: http.get(f"/api/queues/{queue}/stats").json()
                                   ["confirmed"] == 10, within=WITHIN)  # fmt: skip
                assert settled, http.get(f"/api/queues/{queue}/stats").json()
            stats = http.get(f"/api/queues/{queue}/stats").json()
            assert (stats["dead_lettered"], stats["dropped"]) == (0, 0), stats
            assert http.get(f"/api/queues/{dead}").json()["depth"] == 0
        outboxes = {shard: client.llen(f"xump:{{{shard}}}:outbox:{destination}")
                    for shard in four}  # fmt: skip
        assert set(outboxes.values()) == {0}, outboxes
    finally:
        client.close()
        service.close()


# -- the rule, and the record of the wiring made before (Django in a process of its own) ----
RULE = """
import json
import django
django.setup()
from django.conf import settings
from django.core import checks
from django.core.management import call_command
from django.test import override_settings
from engine.catalog import QueueSpec, SelectorSpec
from engine.placement import place
from xumpweb import shards
from xumpweb.wiring.catalog import DjangoCatalog
from xumpweb.wiring.models import DestinationHome

call_command("migrate", verbosity=0)
names = NAMES
main = settings.XUMP_STORE
catalog = DjangoCatalog()
found = {}

def homes():
    return dict(DestinationHome.objects.values_list("destination", "store"))

with override_settings(XUMP_SHARDS=2):
    two = shards.names()
    for queue, store in [(names["queue"], two[1]), (names["served"], two[0])]:
        catalog.save_queue(QueueSpec(queue, store))
    deliver = SelectorSpec(queue=names["queue"], id=1, action="deliver", target=names["lone"])
    catalog.save_selector(deliver)
    catalog.save_selector(SelectorSpec(queue=names["queue"], id=2, action="deliver",
                                       target=names["served"]))
    catalog.save_selector(SelectorSpec(queue=names["queue"], id=3, action="deliver",
                                       target_from="reply_to"))
    catalog.save_selector(SelectorSpec(queue=names["queue"], id=4, action="copy",
                                       target=names["served"]))
    found["recorded"] = homes()
with override_settings(XUMP_SHARDS=4):
    four = shards.names()
    placement = shards.Placement()
    found["four"] = four
    found["home"] = {name: placement.home(name, 1) for name in
                     (names["lone"], names["served"], names["never"], names["lone"] + ":x")}
    # a new queue named for a destination that has a home is made on its home
    found["new_queue"] = placement.place(names["lone"], 1)
    try:  # another store than its home: refused, it would move the destination
        placement.place(names["lone"], 1, explicit=four[3])
        found["explicit"] = "made"
    except Exception as refused:
        found["explicit"] = str(refused)
    found["explicit_home"] = placement.place(names["lone"], 1, explicit=two[1])
    catalog.save_selector(SelectorSpec(queue=names["queue"], id=1, action="deliver",
                                       target=names["other"]))
    found["retargeted"] = homes()
    catalog.delete_selector(names["queue"], 2)
    found["swept"] = homes()
    catalog.delete_queue(names["queue"])
    found["deleted"] = homes()
    catalog.save_queue(QueueSpec(names["queue"], four[3]))
    catalog.save_selector(SelectorSpec(queue=names["queue"], id=1, action="deliver",
                                       target=names["never"]))
    found["on_four"] = homes()
with override_settings(XUMP_SHARDS=2):
    errors = [e for e in checks.run_checks(databases=["default"]) if e.id == "xump.E002"]
    found["shrunk"] = [e.msg for e in errors]
    found["beyond"] = shards.homes_beyond()
print(json.dumps(found))
"""


def test_the_home_rule(redis_server, tmp_path):
    """A DELIVER's destination is given its home when the selector is recorded: the shard
    of the queue of its name, else placement's; kept whatever XUMP_SHARDS says later; a
    new queue of that name is made there; forgotten when the last selector delivering to
    it is deleted. A home on a shard XUMP_SHARDS no longer names is refused at start, as
    a queue there is."""
    store = f"t{unique('r').replace('-', '')}"
    two, four = shard_names(store, 2), shard_names(store, 4)
    names = {
        "queue": unique("q"),
        "served": unique("served"),
        "lone": moved_by_more_shards(two[1], two, four, "lone"),
        "other": unique("other"),
        "never": fresh("never", lambda n: place(n, four) == four[3]),
    }
    code = RULE.replace("NAMES", repr(names))
    found = django_script_with(redis_server.url, tmp_path, code, XUMP_STORE=store)
    assert found["four"] == four
    # recorded: the queue of its name's shard, else placement's (over 2, as made); nothing
    # for an envelope target or a COPY
    assert found["recorded"] == {names["lone"]: two[1], names["served"]: two[0]}
    assert found["home"] == {
        names["lone"]: two[1],  # kept, though placement over 4 says otherwise
        names["served"]: two[0],
        names["never"]: four[3],  # never delivered to: placement over 4
        names["lone"] + ":x": two[1],  # lives with its owner's home
    }
    assert found["new_queue"] == two[1] and found["explicit_home"] == two[1]
    # a queue of its name given another store than its home: refused (it would move the
    # destination and strand what waits in its outbox; the probe saw 5 stranded)
    assert "recorded home" in found["explicit"] and two[1] in found["explicit"]
    # a selector turned to another destination: that one's home recorded, the old one's
    # kept while the selector lives (its deliveries there may be outstanding)
    other = place(names["other"], four)
    assert found["retargeted"] == {**found["recorded"], names["other"]: other}
    # a selector deleted: every home nothing delivers to is forgotten, the old target's too
    # (before, it stayed for good and held a lower XUMP_SHARDS up at start)
    assert found["swept"] == {names["other"]: other}
    assert found["deleted"] == {}
    assert found["on_four"] == {names["never"]: four[3]}
    assert found["beyond"] == {four[3]: 1}
    assert found["shrunk"] == [
        f"XUMP_SHARDS=2 leaves out shards that destinations are read on: {four[3]} "
        "(1 destination(s)); set XUMP_SHARDS back, or delete the selectors that deliver to "
        "them first (a shard removed must be empty)"
    ]


def django_script_with(redis_url: str, directory: Path, code: str, **settings: str) -> dict:
    """tests/web/conftest.py's django_script with `settings` (XUMP_...=value) added."""
    script = "import os\nos.environ.update(" + repr(settings) + ")\n" + code
    return django_script(redis_url, directory, script)


MIGRATION = """
import json
import django
django.setup()
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

call_command("migrate", "wiring", "0007", verbosity=0)
apps = MigrationExecutor(connection).loader.project_state(
    ("wiring", "0007_selector_conditions_target_from")).apps
Store = apps.get_model("wiring", "Store")
Queue = apps.get_model("wiring", "Queue")
Selector = apps.get_model("wiring", "Selector")
stores = {name: Store.objects.create(name=name, kind="redis") for name in STORES}
queues = {}
for name, store in QUEUES.items():
    queues[name] = Queue.objects.create(name=name, store=stores[store])
for number, (queue, action, target, target_from) in enumerate(SELECTORS, start=1):
    Selector.objects.create(queue=queues[queue], number=number, action=action, target=target,
                            target_from=target_from)
call_command("migrate", verbosity=0)
from xumpweb.wiring.models import DestinationHome
print(json.dumps(dict(DestinationHome.objects.values_list("destination", "store"))))
"""


def migrated(redis_url: str, directory: Path, store: str, stores: list[str],
             queues: dict[str, str], selectors: list[tuple]) -> dict[str, str]:  # fmt: skip
    directory.mkdir()
    code = (MIGRATION.replace("STORES", repr(stores)).replace("QUEUES", repr(queues))
            .replace("SELECTORS", repr(selectors)))  # fmt: skip
    return django_script_with(redis_url, directory, code, XUMP_STORE=store, XUMP_SHARDS="4")


def test_the_migration_records_the_homes_of_the_wiring_made_before(redis_server, tmp_path):
    """Every destination a DELIVER names is given the home it was read on: the shard of
    the queue of its name, else placement over the shards the wiring was made with (the
    stores the routers recorded; XUMP_SHARDS may say more by now), else shard 0."""
    store = f"t{unique('m').replace('-', '')}"
    three, four = shard_names(store, 3), shard_names(store, 4)
    lone = moved_by_more_shards(three[1], three, four, "lone")
    split = unique("split")
    queue0, queue1, served = unique("q"), unique("q"), unique("served")
    found = migrated(
        redis_server.url, tmp_path / "three", store, three,
        {queue0: three[0], queue1: three[1], served: three[2]},
        [
            (queue1, "deliver", lone, None),  # read where it was delivered: shard 1
            (queue0, "deliver", served, None),  # its delivery queue's shard
            (queue1, "deliver", f"{queue1}:worker", None),  # with its owner
            (queue0, "deliver", split, None),  # two shards deliver it: placement over 3
            (queue1, "deliver", split, None),
            (queue0, "deliver", None, "reply_to"),  # an envelope target: nothing known
            (queue0, "copy", queue1, None),
        ],
    )  # fmt: skip
    assert found == {
        lone: three[1],
        served: three[2],
        f"{queue1}:worker": three[1],
        split: place(split, three),
    }
    # made with one shard (no other store recorded): shard 0, whatever placement says now
    far = fresh("far", lambda n: place(n, four) != store)
    queue = unique("q")
    alone = migrated(
        redis_server.url, tmp_path / "one", store, [store], {queue: store},
        [(queue, "deliver", far, None)],
    )  # fmt: skip
    assert alone == {far: store}
