"""GET /api/shards (SPEC §10): each shard's queues (from the wiring), inbox depth, forward
backlog and router (from its Redis keys, written here as the shard routers write them).

The service refuses XUMP_SHARDS>1 at start until its shard routers land, so these requests
go through Django's test client in a process of its own (tests/web/in_django.py) with
XUMP_SHARDS=4 overridden per request; each test names its own shards (a fresh XUMP_STORE).
"""

from __future__ import annotations

import json

from tests.web.conftest import unique

SINCE = 1795000000.25


def four_shards() -> tuple[list[str], dict]:
    """Fresh shard names and the settings that make them the service's four shards."""
    main = unique("s")
    return [main, f"{main}-1", f"{main}-2", f"{main}-3"], {"XUMP_SHARDS": 4, "XUMP_STORE": main}


def shards(in_django, settings: dict, who: str = "admin") -> list[dict]:
    answer = in_django.get("/api/shards", who, **settings)
    assert answer["status"] == 200, answer["text"]
    return json.loads(answer["text"])["shards"]


def snapshot(router: str, steps_per_second: float) -> dict:
    return {"time": SINCE + 60, "queues": [], "recent": [], "next_due": None,
            "router": router, "since": SINCE, "steps_per_second": steps_per_second}  # fmt: skip


def test_it_reports_each_shards_queues_inbox_forward_backlog_and_router(in_django) -> None:
    names, settings = four_shards()
    in_django.send(do="wiring", queues={
        f"{names[0]}-a": names[0], f"{names[0]}-b": names[0], f"{names[0]}-c": names[2],
    })  # fmt: skip
    first, second = "celery@alpha:101:Thread-3", "celery@beta:202:MainThread"
    in_django.send(do="shard", store=names[0], lease=f"{first}#7",
                   snapshot=snapshot(first, 12.5), inbox=3)  # fmt: skip
    in_django.send(do="shard", store=names[1], lease=f"{second}#2",
                   snapshot=snapshot(second, 0.5), forward=4)  # fmt: skip
    in_django.send(do="shard", store=names[2], inbox=5, forward=1)
    in_django.send(do="shard", store=names[3], lease=f"{second}#1")

    assert shards(in_django, settings) == [
        {"name": names[0], "queues": 2, "inbox": 3, "forward_backlog": 0, "routed_by": first,
         "since": SINCE, "steps_per_second": 12.5, "ok": True, "problem": None},
        {"name": names[1], "queues": 0, "inbox": 0, "forward_backlog": 4, "routed_by": second,
         "since": SINCE, "steps_per_second": 0.5, "ok": True, "problem": None},
        {"name": names[2], "queues": 1, "inbox": 5, "forward_backlog": 1, "routed_by": None,
         "since": None, "steps_per_second": None, "ok": True, "problem": None},
        {"name": names[3], "queues": 0, "inbox": 0, "forward_backlog": 0, "routed_by": second,
         "since": None, "steps_per_second": None, "ok": True, "problem": None},
    ]  # fmt: skip


def test_a_shard_without_a_snapshot_or_router_reports_nulls(in_django) -> None:
    names, settings = four_shards()
    for name in names:
        in_django.send(do="shard", store=name)
    for shard in shards(in_django, settings):
        assert shard == {"name": shard["name"], "queues": 0, "inbox": 0, "forward_backlog": 0,
                         "routed_by": None, "since": None, "steps_per_second": None,
                         "ok": True, "problem": None}  # fmt: skip
    assert [shard["name"] for shard in shards(in_django, settings)] == names


def test_since_and_rate_are_null_when_the_snapshot_is_another_routers(in_django) -> None:
    names, settings = four_shards()
    gone, now = "celery@alpha:101:Thread-3", "celery@beta:202:Thread-1"
    in_django.send(do="shard", store=names[1], lease=f"{now}#9", snapshot=snapshot(gone, 40.0))
    older = {"time": SINCE, "queues": [], "recent": [], "next_due": None}  # before `router`
    in_django.send(do="shard", store=names[2], lease=f"{now}#3", snapshot=older)
    found = shards(in_django, settings)
    for shard in found[1:3]:
        assert (shard["routed_by"], shard["since"], shard["steps_per_second"]) == (now, None, None)


def test_a_shard_that_cannot_be_read_is_reported_and_the_others_still_are(in_django) -> None:
    names, settings = four_shards()
    in_django.send(do="shard", store=names[1], unreadable=True)
    in_django.send(do="shard", store=names[2], inbox=2)
    found = shards(in_django, settings)
    broken = found[1]
    assert broken["ok"] is False and names[1] in broken["problem"]
    assert "WRONGTYPE" in broken["problem"]
    assert (broken["inbox"], broken["forward_backlog"], broken["routed_by"]) == (None, None, None)
    assert [shard["ok"] for shard in found] == [True, False, True, True]
    assert found[2]["inbox"] == 2


def test_one_shard_is_the_one_store(in_django) -> None:
    main = unique("s")
    in_django.send(do="shard", store=main, inbox=1)
    found = shards(in_django, {"XUMP_SHARDS": 1, "XUMP_STORE": main})
    assert [(shard["name"], shard["inbox"]) for shard in found] == [(main, 1)]


def test_it_needs_read_on_every_queue(in_django) -> None:
    _, settings = four_shards()
    anonymous = in_django.get("/api/shards", "anonymous", **settings)
    assert anonymous["status"] == 401
    assert json.loads(anonymous["text"])["error"] == "unauthorized"
    for who in ("nobody", "token:narrow", "token:metrics"):
        refused = in_django.get("/api/shards", who, **settings)
        assert refused["status"] == 403, who
        assert json.loads(refused["text"])["error"] == "forbidden"
    for who in ("viewer", "admin", "token:admin"):
        assert in_django.get("/api/shards", who, **settings)["status"] == 200, who
