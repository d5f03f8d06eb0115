"""The console with shards (SPEC §10): the dashboard's Shards table (only with more than
one shard), each queue's shard on its page, and the topology's edges that cross shards.

Through Django's test client in a process of its own (tests/web/in_django.py), with
XUMP_SHARDS overridden per request; the shards' Redis keys are written as their routers
write them.
"""

from __future__ import annotations

import json
import re

from tests.web.conftest import unique

NOTHING = "\N{EN DASH}"  # what the table shows for a figure nobody wrote yet


def four_shards() -> tuple[list[str], dict]:
    main = unique("s")
    return [main, f"{main}-1", f"{main}-2", f"{main}-3"], {"XUMP_SHARDS": 4, "XUMP_STORE": main}


def shard_row(page: str, name: str) -> str:
    found = re.search(rf'<tr data-shard="{re.escape(name)}"[^>]*>(.*?)</tr>', page, re.S)
    assert found is not None, f"no row for shard {name}"
    return found[1]


def field(row: str, name: str) -> str:
    found = re.search(rf'data-field="{name}">(.*?)</td>', row, re.S)
    assert found is not None, name
    return re.sub(r"<[^>]+>", "", found[1]).strip()


def test_the_dashboard_shows_each_shard_when_sharded(in_django) -> None:
    names, settings = four_shards()
    in_django.send(do="wiring", queues={f"{names[0]}-a": names[1], f"{names[0]}-b": names[1]})
    router = "celery@alpha:101:Thread-3"
    in_django.send(do="shard", store=names[1], lease=f"{router}#4", inbox=6, forward=2, snapshot={
        "time": 1795000060.0, "queues": [], "recent": [], "next_due": None, "router": router,
        "since": 1795000000.0, "steps_per_second": 31.5})  # fmt: skip
    in_django.send(do="shard", store=names[2], unreadable=True)

    page = in_django.get("/", "viewer", **settings)
    assert page["status"] == 200
    text = page["text"]
    assert '<h2 id="shards-heading">Shards</h2>' in text
    row = shard_row(text, names[1])
    assert [field(row, f) for f in ("queues", "inbox", "forward_backlog", "routed_by")] == [
        "2", "6", "2", router]  # fmt: skip
    assert field(row, "since").startswith("2026-11-18 ")  # epoch 1795000000, UTC
    assert field(row, "steps_per_second") == "31.5"
    idle = shard_row(text, names[3])
    assert (field(idle, "routed_by"), field(idle, "since"), field(idle, "steps_per_second")) == (
        "nobody", NOTHING, NOTHING)  # fmt: skip
    assert "WRONGTYPE" in field(shard_row(text, names[2]), "problem")
    assert f'data-shard="{names[0]}"' in text

    rows = in_django.get("/dashboard/rows/", "viewer", **settings)["text"]
    assert '<section id="shards" aria-labelledby="shards-heading" hx-swap-oob="true">' in rows
    assert field(shard_row(rows, names[1]), "inbox") == "6"


def test_the_dashboard_has_no_shards_table_with_one_shard(in_django) -> None:
    main = unique("s")
    for path in ("/", "/dashboard/rows/"):
        answer = in_django.get(path, "admin", XUMP_SHARDS=1, XUMP_STORE=main)
        assert answer["status"] == 200
        assert 'id="shards"' not in answer["text"] and "data-shard" not in answer["text"]


def test_a_queue_page_names_its_shard_when_sharded(in_django) -> None:
    in_django.send(do="route")  # the service's own store: its queues answer
    queue = unique("paged")
    created = in_django.post("/api/queues", {"name": queue})
    assert created["status"] == 201, created["text"]
    store = json.loads(created["text"])["store"]

    sharded = in_django.get(f"/queues/{queue}/", "admin", XUMP_SHARDS=4)["text"]
    assert re.search(rf'shard <a class="mono" data-shard href="/#shards">{store}</a>', sharded)
    alone = in_django.get(f"/queues/{queue}/", "admin", XUMP_SHARDS=1)["text"]
    assert f"store {store}" in alone and "data-shard" not in alone


def test_the_topology_marks_edges_between_queues_on_different_shards(in_django) -> None:
    names, settings = four_shards()
    source, near, far, dead = (f"{names[0]}-{n}" for n in ("source", "near", "far", "dead"))
    in_django.send(
        do="wiring", queues={source: names[0], near: names[0], far: names[2], dead: names[3]},
        dead_letters={source: dead},
        selectors=[{"queue": source, "action": "copy", "target": near},
                   {"queue": source, "action": "move", "target": far}],
    )  # fmt: skip

    def crossing(**overridden) -> dict[str, tuple]:
        graph = json.loads(in_django.get("/topology/graph/", "admin", **overridden)["text"])
        return {e["target"]: (e["action"], e["crosses"], e.get("shards"))
                for e in graph["edges"] if e["queue"] == source}  # fmt: skip

    assert crossing(**settings) == {
        f"q:{near}": ("copy", False, None),
        f"q:{far}": ("move", True, [names[0], names[2]]),
        f"q:{dead}": ("dead-letter", True, [names[0], names[3]]),
    }
    assert {crosses for _, crosses, _ in crossing(XUMP_SHARDS=1).values()} == {False}
    page = in_django.get("/topology/", "admin", **settings)["text"]
    assert 'data-legend="crosses-shards"' in page
    assert f'class="cross-shard" data-crosses="s:{source}#2"' in page
    assert 'data-legend="crosses-shards"' not in in_django.get("/topology/", "admin")["text"]
