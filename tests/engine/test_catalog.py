"""An engine built from another engine's catalog has the same wiring: queues, selectors with
their ids, conditions, actions, credit settings and enabled state."""

from __future__ import annotations

from engine import Engine, Message
from engine.patterns import parrot, wolfpack


def wiring(engine: Engine) -> list:
    def selectors(queue: str) -> list:
        return [(s.id, s.when, s.action, s.target, s.enabled, s.start)
                for s in engine.selectors(queue)]  # fmt: skip

    return [
        (q.name, q.store, q.limit, q.history, q.dead_letter, q.self_destruct, selectors(q.name))
        for q in engine.queues()
    ]


def test_a_new_engine_on_the_same_catalog_rebuilds_the_same_wiring(eng: Engine) -> None:
    wolfpack(eng, "jobs", "w1", credit=2)
    parrot(eng, "ann", "stock.#")
    eng.queue_create("dlq")
    eng.queue_create("orders", history=10, dead_letter="dlq", limit=100)
    eng.selector_create("orders").when_match("prefix", "eu.").when_filter("qty > 5").do_move(
        "dlq"
    ).enable()
    eng.selector_create("orders").when_default().do_delete()  # left disabled
    eng.selector_delete("orders", eng.selector_create("orders").id)  # ids are not reused

    again = Engine(catalog=eng.catalog)
    assert wiring(again) == wiring(eng)
    assert again.selector_create("orders").id == 4


def test_the_rebuilt_engine_routes_like_the_first(eng: Engine) -> None:
    eng.queue_create("in")
    eng.queue_create("eu")
    eng.selector_create("in").when_match("topic", "orders.eu.*").when_filter("qty > 5").do_copy(
        "eu"
    ).enable()
    eng.selector_create("eu").when_always().do_deliver("app").enable()
    again = Engine(catalog=eng.catalog)
    got = again.publish("in", Message(address="orders.eu.new", headers={"qty": 9}))
    assert [d.destination for d in got] == ["app"]
    assert again.publish("in", Message(address="orders.eu.new", headers={"qty": 1})) == []
