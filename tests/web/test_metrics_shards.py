"""/metrics with shards (SPEC §10): per-shard gauges labelled `shard` (queues, inbox depth,
forward backlog, up, the lease holder with `shard` and `holder`), read as Prometheus reads
them; with one shard the store's unlabelled figures stay as they were.

Through Django's test client in a process of its own (tests/web/in_django.py), with
XUMP_SHARDS overridden per request.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.web.conftest import unique


def scrape(in_django, **settings) -> dict[str, dict[tuple, float]]:
    """/metrics as the metrics token reads it: sample name -> {label items: value}."""
    answer = in_django.get("/metrics", "token:metrics", **settings)
    assert answer["status"] == 200, answer["text"]
    found: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(answer["text"]):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def by_shard(figures: dict, name: str) -> dict[str, float]:
    return {dict(labels)["shard"]: value for labels, value in figures.get(name, {}).items()}


def test_each_shard_has_its_gauges_labelled_shard(in_django) -> None:
    main = unique("s")
    names = [main, f"{main}-1", f"{main}-2", f"{main}-3"]
    in_django.send(do="wiring", queues={f"{main}-a": names[0], f"{main}-b": names[3],
                                        f"{main}-c": names[3]})  # fmt: skip
    router = "celery@beta:202:Thread-1"
    in_django.send(do="shard", store=names[0], inbox=4)
    in_django.send(do="shard", store=names[1], forward=3, lease=f"{router}#5", snapshot={
        "time": 1795000060.0, "queues": [], "recent": [], "next_due": None, "router": router,
        "since": 1795000000.0, "steps_per_second": 8.0})  # fmt: skip
    in_django.send(do="shard", store=names[2], unreadable=True)
    in_django.send(do="shard", store=names[3])

    figures = scrape(in_django, XUMP_SHARDS=4, XUMP_STORE=main)
    assert by_shard(figures, "xump_shard_queues") == dict(zip(names, [1, 0, 0, 2], strict=True))
    assert by_shard(figures, "xump_shard_up") == dict(zip(names, [1, 1, 0, 1], strict=True))
    unread = [names[0], names[1], names[3]]  # the unreadable shard has no Redis figures
    assert by_shard(figures, "xump_shard_inbox_length") == dict(zip(unread, [4, 0, 0],
                                                                    strict=True))  # fmt: skip
    assert by_shard(figures, "xump_shard_forward_backlog") == dict(zip(unread, [0, 3, 0],
                                                                       strict=True))  # fmt: skip
    assert figures["xump_shard_router_lease_holder"] == {
        (("holder", router), ("shard", names[1])): 1
    }
    assert by_shard(figures, "xump_shard_router_steps_per_second") == {names[1]: 8.0}


def test_one_store_keeps_its_metrics_and_gains_one_shard_sample(in_django) -> None:
    figures = scrape(in_django)  # the service's own store, as it starts: one shard
    assert set(figures["xump_inbox_length"]) == {()}  # unlabelled, as before shards
    assert "xump_router_lease_holder" not in figures or all(
        dict(labels).keys() == {"holder"} for labels in figures["xump_router_lease_holder"]
    )
    assert len(by_shard(figures, "xump_shard_inbox_length")) == 1
    assert list(by_shard(figures, "xump_shard_up").values()) == [1]
