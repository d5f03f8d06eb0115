"""SPEC §2, rule by rule, through the public engine API."""

from __future__ import annotations

import time

import pytest

from engine import Engine, Message
from engine.errors import InvalidArgument, NotFound, QueueFull
from engine.patterns import housecat, parrot, wolfpack


def deliver(eng: Engine, queue: str, destination: str, credit: int = -1, when: str = "always"):
    selector = eng.selector_create(queue)
    getattr(selector, f"when_{when}")()
    return selector.do_deliver(destination).set_credit(credit)


def bodies(items) -> list[bytes]:
    """Bodies of Deliveries or Messages, in order."""
    return [getattr(item, "message", item).body for item in items]


# -- rule 1: matching --------------------------------------------------------------------
def test_match_operators_on_address_and_on_a_header(eng: Engine) -> None:
    eng.queue_create("in")
    for op, pattern, field, dest in [
        ("eq", "a.b", "address", "eq"),
        ("topic", "a.*", "address", "topic"),
        ("prefix", "a.", "address", "prefix"),
        ("regex", r"a\.\w", "address", "regex"),
        ("eq", "eu", "region", "header"),
        ("eq", "7", "priority", "number-header"),
    ]:
        sel = eng.selector_create("in").when_match(op, pattern, field)
        sel.do_copy(eng.queue_create(f"to-{dest}").name).enable()
        deliver(eng, f"to-{dest}", dest).enable()
    got = eng.publish("in", Message(address="a.b", headers={"region": "eu", "priority": 7}))
    assert sorted(d.destination for d in got) == sorted(
        ["eq", "topic", "prefix", "regex", "header", "number-header"]
    )
    got = eng.publish("in", Message(address="a.bc"))
    assert sorted(d.destination for d in got) == ["prefix", "topic"]


def test_match_and_filter_combine_as_and(eng: Engine) -> None:
    eng.queue_create("in")
    sel = deliver(eng, "in", "app").when_match("topic", "orders.#").when_filter("qty > 10")
    sel.enable()
    assert eng.publish("in", Message(address="orders.eu", headers={"qty": 5})) == []
    assert len(eng.publish("in", Message(address="orders.eu", headers={"qty": 50}))) == 1
    assert eng.publish("in", Message(address="news", headers={"qty": 50})) == []


def test_disabled_selectors_do_not_route(eng: Engine) -> None:
    eng.queue_create("q")
    deliver(eng, "q", "app")  # never enabled
    assert eng.publish("q", Message()) == []
    assert eng.queue_fetch("q").depth == 1


# -- rule 2 and 5: copies --------------------------------------------------------------
def test_every_matching_copy_runs_and_the_message_is_processed(eng: Engine) -> None:
    eng.queue_create("src", history=5)
    for name in ("c1", "c2"):
        eng.queue_create(name)
        eng.selector_create("src").when_always().do_copy(name).enable()
    eng.publish("src", Message(body=b"x"))
    assert eng.queue_fetch("c1").depth == eng.queue_fetch("c2").depth == 1
    assert bodies(eng.browse("src")) == [b"x"]
    assert eng.queue_fetch("src").depth == 0


def test_copies_share_one_body_object(eng: Engine) -> None:
    eng.queue_create("src")
    payload = b"y" * 1000
    for name in ("c1", "c2", "c3"):
        eng.queue_create(name)
        eng.selector_create("src").when_always().do_copy(name).enable()
    eng.publish("src", Message(body=payload))
    copies = [eng.peek(name)[0] for name in ("c1", "c2", "c3")]
    assert copies[0].body is copies[1].body is copies[2].body
    assert len({m.mid for m in copies}) == 1
    assert [m.seq for m in copies] == [1, 1, 1]


def test_diamond_copies_arrive_once(eng: Engine) -> None:
    for name in ("top", "left", "right", "bottom"):
        eng.queue_create(name)
    for source, target in (
        ("top", "left"),
        ("top", "right"),
        ("left", "bottom"),
        ("right", "bottom"),
    ):
        eng.selector_create(source).when_always().do_copy(target).enable()
    eng.publish("top", Message())
    assert eng.queue_fetch("bottom").depth == 1


# -- rule 3: round-robin takers ---------------------------------------------------------
def test_takers_are_served_round_robin(eng: Engine) -> None:
    eng.queue_create("q")
    for name in ("a", "b", "c"):
        deliver(eng, "q", name).enable()
    got = eng.publish_many("q", [Message() for _ in range(7)])
    assert [d.destination for d in got] == ["a", "b", "c", "a", "b", "c", "a"]


def test_taker_without_credit_is_skipped(eng: Engine) -> None:
    eng.queue_create("q")
    deliver(eng, "q", "a", credit=1).enable()
    deliver(eng, "q", "b").enable()
    got = eng.publish_many("q", [Message() for _ in range(4)])
    assert [d.destination for d in got] == ["a", "b", "b", "b"]


def test_delete_never_needs_credit_and_keeps_history(eng: Engine) -> None:
    eng.queue_create("q", history=3)
    eng.selector_create("q").when_always().do_delete().set_credit(0).enable()
    eng.publish_many("q", [Message(body=str(n).encode()) for n in range(5)])
    assert eng.queue_fetch("q").depth == 0
    assert bodies(eng.browse("q", start="oldest")) == [b"2", b"3", b"4"]


# -- rule 4: waiting for credit, in order --------------------------------------------------
def test_move_waits_for_credit_then_resumes_in_order(eng: Engine) -> None:
    eng.queue_create("src")
    eng.queue_create("dst")
    mover = eng.selector_create("src").when_always().do_move("dst").set_credit(0)
    mover.enable()
    eng.publish_many("src", [Message(body=str(n).encode()) for n in range(5)])
    assert eng.queue_fetch("src").depth == 5
    mover.credit(2)
    assert bodies(eng.peek("dst")) == [b"0", b"1"]
    mover.credit(10)
    assert bodies(eng.peek("dst")) == [b"0", b"1", b"2", b"3", b"4"]


def test_held_head_blocks_newer_messages_and_their_copies(eng: Engine) -> None:
    eng.queue_create("q")
    eng.queue_create("audit")
    eng.selector_create("q").when_always().do_copy("audit").enable()
    worker = deliver(eng, "q", "w", credit=0)
    worker.enable()
    eng.publish_many("q", [Message(body=b"1"), Message(body=b"2")])
    assert eng.queue_fetch("audit").depth == 0  # nothing of a held message runs
    got = worker.credit(1)
    assert bodies(got) == [b"1"]
    assert eng.queue_fetch("audit").depth == 1


# -- rule 6: nothing matched ------------------------------------------------------------
def test_default_selector_takes_what_nothing_else_matched(eng: Engine) -> None:
    eng.queue_create("q")
    eng.selector_create("q").when_match("eq", "known").do_deliver("known").enable()
    deliver(eng, "q", "fallback", when="default").enable()
    assert [d.destination for d in eng.publish("q", Message(address="known"))] == ["known"]
    assert [d.destination for d in eng.publish("q", Message(address="other"))] == ["fallback"]


def test_queue_without_selectors_holds_messages_until_one_is_enabled(eng: Engine) -> None:
    eng.queue_create("q")
    eng.publish_many("q", [Message(body=b"1"), Message(body=b"2")])
    assert eng.queue_fetch("q").depth == 2
    assert bodies(deliver(eng, "q", "late").enable()) == [b"1", b"2"]


def test_unmatched_message_goes_to_dead_letter_queue_as_unroutable(eng: Engine) -> None:
    eng.queue_create("dlq")
    eng.queue_create("q", dead_letter="dlq")
    eng.selector_create("q").when_match("eq", "x").do_deliver("app").enable()
    eng.publish("q", Message(address="y", body=b"lost"))
    [dead] = eng.peek("dlq")
    assert (dead.body, dead.headers["x-reason"], dead.headers["x-original-queue"]) == (
        b"lost",
        "unroutable",
        "q",
    )
    assert eng.stats("q")["dead_lettered"] == 1


def test_unmatched_message_without_dead_letter_queue_is_dropped_and_counted(eng: Engine) -> None:
    eng.queue_create("q")
    eng.selector_create("q").when_match("eq", "x").do_deliver("app").enable()
    eng.publish("q", Message(address="y"))
    assert eng.stats("q")["dropped"] == 1
    assert eng.queue_fetch("q").depth == 0


# -- rule 7: overflow ---------------------------------------------------------------------
def test_full_queue_with_dead_letter_sends_overflow_there(eng: Engine) -> None:
    eng.queue_create("dlq")
    eng.queue_create("q", limit=1, dead_letter="dlq")
    eng.publish("q", Message(body=b"1"))
    eng.publish("q", Message(body=b"2"))
    [dead] = eng.peek("dlq")
    assert (dead.body, dead.headers["x-reason"]) == (b"2", "overflow")


def test_full_queue_without_overflow_or_dead_letter_raises_queue_full(eng: Engine) -> None:
    eng.queue_create("q", limit=1)
    eng.publish("q", Message())
    with pytest.raises(QueueFull, match="limit 1"):
        eng.publish("q", Message())
    with pytest.raises(QueueFull):
        eng.publish_many("q", [Message()])
    assert eng.queue_fetch("q").depth == 1


def test_copy_into_full_queue_is_dropped_without_blocking_the_source(eng: Engine) -> None:
    eng.queue_create("src")
    eng.queue_create("small", limit=1)
    eng.selector_create("src").when_always().do_copy("small").enable()
    deliver(eng, "src", "app").enable()
    assert len(eng.publish("src", Message())) == 1
    assert len(eng.publish("src", Message())) == 1
    assert eng.queue_fetch("small").depth == 1
    assert eng.stats("small")["dropped"] == 1


# -- rule 8: history ----------------------------------------------------------------------
def test_history_keeps_only_the_newest(eng: Engine) -> None:
    eng.queue_create("q", history=3)
    eng.selector_create("q").when_always().do_delete().enable()
    eng.publish_many("q", [Message(body=str(n).encode()) for n in range(10)])
    assert [m.seq for m in eng.browse("q", start="latest")] == [10, 9, 8]
    assert eng.queue_fetch("q").history_size == 3
    eng.queue_update("q", history=1)
    assert [m.seq for m in eng.browse("q")] == [10]


def test_since_returns_history_from_a_time(eng: Engine) -> None:
    eng.queue_create("q", history=10)
    eng.selector_create("q").when_always().do_delete().enable()
    eng.publish("q", Message(body=b"old"))
    time.sleep(0.01)
    middle = time.time()
    eng.publish("q", Message(body=b"new"))
    assert bodies(eng.since("q", middle)) == [b"new"]


def test_outstanding_messages_are_not_history_until_settled(eng: Engine) -> None:
    eng.queue_create("q", history=10)
    deliver(eng, "q", "app").enable()
    [delivery] = eng.publish("q", Message())
    assert eng.browse("q") == []
    eng.confirm(delivery)
    assert len(eng.browse("q")) == 1


# -- rules 9-11: bounce, deliver, settlement -------------------------------------------------
def test_bounce_without_return_address_keeps_the_address(eng: Engine) -> None:
    eng.queue_create("in")
    eng.queue_create("back")
    eng.selector_create("in").when_always().do_bounce("back").enable()
    eng.publish("in", Message(address="a.b"))
    [bounced] = eng.peek("back")
    assert bounced.address == "a.b"
    assert bounced.headers["x-original-address"] == "a.b"


def test_delivery_carries_destination_queue_selector_and_counts(eng: Engine) -> None:
    eng.queue_create("q")
    selector = deliver(eng, "q", "alice")
    [delivery] = selector.enable() + eng.publish("q", Message(address="x", body=b"b"))
    assert (delivery.destination, delivery.queue, delivery.selector_id) == ("alice", "q", 1)
    assert delivery.message.destination == "alice"
    assert delivery.message.seq == 1
    assert (delivery.redelivered, delivery.delivery_count) == (False, 1)


def test_move_is_settled_when_dropped_downstream(eng: Engine) -> None:
    eng.queue_create("src", history=5)
    eng.queue_create("dst")
    mover = eng.selector_create("src").when_always().do_move("dst").set_credit(1)
    mover.enable()
    eng.selector_create("dst").when_match("eq", "never").do_deliver("x").enable()
    eng.publish("src", Message(body=b"1"))  # unroutable in dst: dropped, settled
    assert mover.available_credit == 1
    assert bodies(eng.browse("src")) == [b"1"]


def test_reject_without_dead_letter_drops_and_returns_credit(eng: Engine) -> None:
    eng.queue_create("q")
    worker = deliver(eng, "q", "w", credit=1)
    [first] = worker.enable() + eng.publish("q", Message(body=b"1"))
    eng.publish("q", Message(body=b"2"))
    assert bodies(eng.reject(first, requeue=False)) == [b"2"]
    assert eng.stats("q")["dropped"] == 1


# -- rule 12: deleting selectors and queues ------------------------------------------------
def test_deleting_a_mover_withdraws_unrouted_copies_downstream(eng: Engine) -> None:
    eng.queue_create("src")
    eng.queue_create("dst")
    mover = eng.selector_create("src").when_always().do_move("dst")
    mover.enable()
    eng.publish_many("src", [Message(body=b"1"), Message(body=b"2")])
    assert eng.queue_fetch("dst").depth == 2
    eng.selector_delete("src", mover.id)
    assert eng.queue_fetch("dst").depth == 0
    assert bodies(eng.peek("src")) == [b"1", b"2"]


def test_self_destructing_queue_goes_with_its_last_selector(eng: Engine) -> None:
    eng.queue_create("tmp", self_destruct=True)
    first = deliver(eng, "tmp", "a")
    second = deliver(eng, "tmp", "b")
    eng.selector_delete("tmp", first.id)
    assert eng.queue_fetch("tmp").name == "tmp"
    eng.selector_delete("tmp", second.id)
    with pytest.raises(NotFound):
        eng.queue_fetch("tmp")


def test_selector_ids_are_never_reused(eng: Engine) -> None:
    eng.queue_create("q")
    ids = [eng.selector_create("q").id for _ in range(3)]
    eng.selector_delete("q", ids[-1])
    assert eng.selector_create("q").id == 4


def test_deleting_a_queue_settles_what_was_moved_into_it(eng: Engine) -> None:
    eng.queue_create("src")
    eng.queue_create("dst")
    mover = eng.selector_create("src").when_always().do_move("dst").set_credit(1)
    mover.enable()
    eng.publish_many("src", [Message(body=b"1"), Message(body=b"2")])
    assert eng.queue_fetch("src").depth == 1
    eng.queue_delete("dst")
    assert mover.available_credit == 1  # settled as dropped: credit is back
    assert eng.queue_fetch("src").depth == 1  # waits: its target queue is gone
    eng.queue_create("dst")
    assert mover.credit(1) == []
    assert bodies(eng.peek("dst")) == [b"2"]


# -- rule 13: start positions -------------------------------------------------------------
def test_start_at_a_seq_replays_history_from_there(eng: Engine) -> None:
    eng.queue_create("q", history=10)
    eng.selector_create("q").when_always().do_delete().enable()
    eng.publish_many("q", [Message(body=str(n).encode()) for n in range(1, 6)])
    late = deliver(eng, "q", "late").start_at(4)
    assert bodies(late.enable()) == [b"4", b"5"]
    assert eng.queue_fetch("q").history_size == 5


def test_a_late_selector_replays_only_the_history_its_when_selects(eng: Engine) -> None:
    """Rule 13: the replay runs the selector's own WHEN (filter, match, both) and DO."""
    eng.queue_create("src", history=100)
    eng.queue_create("dst")
    eng.selector_create("src").when_always().do_delete().enable()
    for priority, address in ((1, "a.x"), (9, "b.x"), (3, "a.y"), (7, "a.z")):
        eng.publish("src", Message(address=address, headers={"priority": priority}))
    high = eng.selector_create("src").when_filter("priority > 5").do_copy("dst")
    assert high.start_at("head").enable() == []
    assert [m.headers["priority"] for m in eng.peek("dst")] == [9, 7]
    topic = deliver(eng, "src", "app").when_match("topic", "a.*").start_at("head")
    assert [d.message.address for d in topic.enable()] == ["a.x", "a.y", "a.z"]
    both = deliver(eng, "src", "both").when_match("prefix", "a.").when_filter("priority > 2")
    assert [d.message.address for d in both.start_at("head").enable()] == ["a.y", "a.z"]
    on_header = deliver(eng, "src", "header").when_match("eq", "9", field="priority")
    assert [d.message.address for d in on_header.start_at("head").enable()] == ["b.x"]
    assert eng.queue_fetch("src").history_size == 4  # history is not altered


def test_a_late_selector_with_little_credit_replays_matches_only(eng: Engine) -> None:
    """Non-matching history costs no credit; the replay resumes as credit comes back."""
    eng.queue_create("src", history=100)
    eng.selector_create("src").when_always().do_delete().enable()
    eng.publish_many(
        "src", [Message(body=str(n).encode(), headers={"even": n % 2 == 0}) for n in range(10)]
    )
    late = deliver(eng, "src", "app", credit=2).when_filter("even = TRUE").start_at("head")
    got = late.enable()
    assert bodies(got) == [b"0", b"2"]
    while got:
        more = eng.confirm(got.pop(0))
        got.extend(more)
        if more:
            assert bodies(more)[0] in (b"4", b"6", b"8")
    assert eng.stats("src")["confirmed"] == 5


def test_a_paused_selector_resumes_where_it_was(eng: Engine) -> None:
    """pause() and resume() around a change of wiring (the service's selector update): no
    history replayed anew, the replay under way goes on from where it stood, and what
    waits in the queue is routed by the changed WHEN."""
    eng.queue_create("src", history=100)
    eng.selector_create("src").when_always().do_delete().enable()
    eng.publish_many("src", [Message(body=str(n).encode()) for n in range(6)])
    late = deliver(eng, "src", "app", credit=2).start_at("head")
    got = late.enable()
    assert bodies(got) == [b"0", b"1"]  # the replay waits for credit
    position = late.pause()
    assert late.enabled is False and position is not None
    late.when_filter("TRUE")
    assert late.resume(position) == []  # no credit yet: nothing replayed anew
    assert bodies(eng.confirm(got[0])) == [b"2"]  # the replay goes on from where it was
    assert bodies(eng.confirm(got[1])) == [b"3"]
    eng.queue_create("wait")
    picky = deliver(eng, "wait", "w").when_match("eq", "x")
    picky.enable()
    position = picky.pause()
    assert position is None
    eng.publish("wait", Message(address="y"))
    assert eng.stats("wait")["depth"] == 1  # held: no enabled selector
    picky.when_match("eq", "y")
    assert [d.message.address for d in picky.resume(position)] == ["y"]
    assert picky.resume() == []  # enabled already: nothing


# -- rule 14: unknown queues --------------------------------------------------------------
def test_publish_to_unknown_queue_goes_to_engine_dead_letter(eng_dlq: Engine) -> None:
    eng_dlq.publish("nowhere", Message(body=b"lost"))
    [dead] = eng_dlq.peek("$dead")
    assert (dead.headers["x-reason"], dead.headers["x-original-queue"]) == (
        "no-such-queue",
        "nowhere",
    )


def test_publish_to_unknown_queue_without_dead_letter_raises(eng: Engine) -> None:
    with pytest.raises(NotFound, match="nowhere"):
        eng.publish("nowhere", Message())


# -- rule 15 and stats ----------------------------------------------------------------------
def test_stats_count_what_happened(eng: Engine) -> None:
    eng.queue_create("q")
    worker = deliver(eng, "q", "w")
    worker.enable()
    [a] = eng.publish("q", Message())
    [b] = eng.publish("q", Message())
    eng.confirm(a)
    [b2] = eng.reject(b)
    stats = eng.stats("q")
    assert {
        k: stats[k]
        for k in (
            "published",
            "routed",
            "delivered",
            "confirmed",
            "rejected",
            "depth",
            "outstanding",
        )
    } == {
        "published": 2,
        "routed": 3,
        "delivered": 3,
        "confirmed": 1,
        "rejected": 1,
        "depth": 0,
        "outstanding": 1,
    }
    assert b2.redelivered


# -- patterns -------------------------------------------------------------------------------
def test_wolfpack_three_workers_credit_one_share_300_messages_evenly(eng: Engine) -> None:
    for worker in ("w1", "w2", "w3"):
        wolfpack(eng, "svc", worker, credit=1)
    pending = eng.publish_many("svc", [Message(body=str(n).encode()) for n in range(300)])
    order = []
    while pending:
        delivery = pending.pop(0)
        order.append((delivery.destination, int(delivery.message.body)))
        pending.extend(eng.confirm(delivery))
    assert [dest for dest, _ in order[:6]] == ["w1", "w2", "w3", "w1", "w2", "w3"]
    assert sorted(n for _, n in order) == list(range(300))
    counts = {w: sum(1 for d, _ in order if d == w) for w in ("w1", "w2", "w3")}
    assert counts == {"w1": 100, "w2": 100, "w3": 100}


def test_housecat_delivers_only_to_the_addressed_recipient(eng: Engine) -> None:
    for name in ("alice", "bob"):
        housecat(eng, name)
    assert [d.destination for d in eng.publish("housecat", Message(address="bob"))] == ["bob"]
    assert eng.publish("housecat", Message(address="carol")) == []


def test_parrot_delivers_once_to_each_matching_subscriber(eng: Engine) -> None:
    parrot(eng, "a", "stock.#")
    parrot(eng, "b", "stock.*.price")
    parrot(eng, "c", "news.#")
    got = eng.publish("parrot", Message(address="stock.ibm.price"))
    assert sorted(d.destination for d in got) == ["a", "b"]


def test_patterns_are_idempotent(eng: Engine) -> None:
    first = wolfpack(eng, "svc", "w1")
    again = wolfpack(eng, "svc", "w1")
    assert first.selectors == again.selectors
    assert len(eng.selectors("svc")) == 1
    assert parrot(eng, "a", "x.#").selectors == parrot(eng, "a", "x.#").selectors
    assert housecat(eng, "z").selectors == housecat(eng, "z").selectors


def test_a_wolfpack_worker_built_again_with_another_credit_gets_it(eng: Engine) -> None:
    first = wolfpack(eng, "svc", "w1", credit=1)
    again = wolfpack(eng, "svc", "w1", credit=3)
    assert again.selectors == first.selectors and first.updated_selectors == ()
    [move] = eng.selectors("svc")
    assert move.spec.credit == 3 and again.updated_selectors == (("svc", move.id),)
    assert wolfpack(eng, "svc", "w1", credit=3).updated_selectors == ()  # nothing to change


# -- delivery timeouts ----------------------------------------------------------------------
def test_unconfirmed_deliveries_past_the_timeout_are_redelivered_in_order(eng: Engine) -> None:
    eng.queue_create("q")
    worker = deliver(eng, "q", "w", credit=2)
    first = worker.enable() + eng.publish_many("q", [Message(body=str(n).encode())
                                                     for n in range(3)])  # fmt: skip
    assert bodies(first) == [b"0", b"1"]
    assert eng.expire(3600) == []  # nothing is that old
    again = eng.expire(0)
    assert [(d.message.body, d.redelivered, d.delivery_count) for d in again] == [
        (b"0", True, 2),
        (b"1", True, 2),
    ]
    with pytest.raises(NotFound):
        eng.confirm(first[0])  # the old tag stopped working
    assert bodies(eng.confirm(again[0])) == [b"2"]
    stats = eng.stats("q")
    assert (stats["timed_out"], stats["outstanding"], stats["depth"]) == (2, 2, 0)
    assert stats["expired"] == 0  # a delivery timeout is not a ttl expiry (SPEC §8)


def test_expire_refuses_a_negative_timeout(eng: Engine, refused) -> None:
    refused(eng, InvalidArgument, eng.expire, -1)
    refused(eng, InvalidArgument, eng.expire, "60")


def test_expire_tags_redelivers_just_those_deliveries(eng: Engine) -> None:
    """The router knows when a subscriber took each delivery; it expires by tag."""
    eng.queue_create("q")
    deliver(eng, "q", "w").enable()
    first = eng.publish_many("q", [Message(body=str(n).encode()) for n in range(3)])
    eng.confirm(first[2])
    again = eng.expire_tags([first[1].tag, first[2].tag, "not:1:a-tag", first[1].tag])
    assert [(d.message.body, d.redelivered, d.delivery_count) for d in again] == [(b"1", True, 2)]
    with pytest.raises(NotFound):
        eng.confirm(first[1])
    eng.confirm_many([first[0], again[0]])
    assert (eng.stats("q")["timed_out"], eng.stats("q")["expired"]) == (1, 0)
    assert eng.expire_tags([]) == []


# -- destinations away ------------------------------------------------------------------------
def test_a_stranded_worker_queue_gives_its_work_back_to_the_pack(eng: Engine) -> None:
    """Work moved to a worker whose destination is away goes back to the front of the
    service queue, in order, for the other workers; the worker takes again when back."""
    w1 = wolfpack(eng, "jobs", "w1", credit=2)
    wolfpack(eng, "jobs", "w2", credit=2)
    assert eng.worker_destinations() == {"w1", "w2"}
    sent = eng.publish_many("jobs", [Message(body=str(n).encode()) for n in range(8)])
    to_w1 = [d for d in sent if d.destination == "w1"]
    to_w2 = [d for d in sent if d.destination == "w2"]
    assert (bodies(to_w1), bodies(to_w2)) == ([b"0", b"2"], [b"1", b"3"])
    caused, revoked = eng.absent({"w1"})
    assert caused == []  # w2 has no credit left: they wait at the head of jobs
    assert [(d.tag, d.destination) for d in revoked] == [(d.tag, "w1") for d in to_w1]
    assert bodies(eng.peek("jobs")) == [b"0", b"2", b"4", b"5", b"6", b"7"]
    assert eng.queue_fetch(w1.queue).depth == 0
    assert eng.stats(w1.queue)["outstanding"] == 0
    mover = eng.selector_fetch(*w1.selectors[1])
    assert mover.held and mover.available_credit == 2  # credit back, as if settled
    with pytest.raises(NotFound):
        eng.confirm(to_w1[0])  # revoked
    got = eng.confirm(to_w2[0]) + eng.confirm(to_w2[1])
    assert [(d.destination, d.message.body) for d in got] == [("w2", b"0"), ("w2", b"2")]
    assert eng.absent({"w1"}) == ([], [])  # held already, nothing more to recall
    back, revoked = eng.absent(set())  # w1 is back: it takes the next ones
    assert revoked == [] and not mover.held
    assert [(d.destination, d.message.body) for d in back] == [("w1", b"4"), ("w1", b"5")]
    stats = eng.stats("jobs")
    assert (stats["outstanding"], stats["depth"]) == (4, 2)


def test_a_lone_worker_keeps_its_work_while_away(eng: Engine) -> None:
    """With no other worker to take it, the work stays where it waits (delivered once when
    the worker comes back); so does work of a queue that was not moved there. New work
    waits in the service queue meanwhile."""
    w1 = wolfpack(eng, "jobs", "w1", credit=1)
    sent = eng.publish_many("jobs", [Message(body=b"a"), Message(body=b"b")])
    housecat(eng, "cat")
    eng.publish("housecat", Message(address="cat", body=b"c"))
    assert eng.absent({"w1", "cat"}) == ([], [])
    assert bodies(eng.peek("jobs")) == [b"b"]
    assert eng.stats(w1.queue)["outstanding"] == 1
    assert eng.confirm(sent[0]) == []  # w1 is away: b waits for it in jobs
    [back] = eng.absent(set())[0]
    assert (back.destination, back.message.body, back.redelivered) == ("w1", b"b", False)


def test_all_workers_away_hold_what_they_have_and_take_nothing(eng: Engine) -> None:
    wolfpack(eng, "jobs", "w1")
    wolfpack(eng, "jobs", "w2")
    sent = eng.publish_many("jobs", [Message(body=str(n).encode()) for n in range(3)])
    assert eng.absent({"w1", "w2"}) == ([], [])
    assert eng.confirm(sent[0]) == []  # nobody is there to take 2: it waits in jobs
    assert bodies(eng.peek("jobs")) == [b"2"]
    caused, revoked = eng.absent({"w2"})  # w1 is back: it takes w2's and what waits
    assert [(d.destination, d.message.body) for d in revoked] == [("w2", b"1")]
    assert [(d.destination, d.message.body) for d in caused] == [("w1", b"1")]


def test_a_pack_whose_workers_never_came_routes_each_job_once(eng: Engine) -> None:
    """Issue 21: ten workers that never connected go away one after the other (as the
    router sees each one away for the delivery timeout). What was recalled waits in the
    service queue; nothing is routed again among workers just as absent (500 published
    used to be 950 routed, each worker queue "delivered 100, expired 50")."""
    workers = [f"w{n}" for n in range(10)]
    for worker in workers:
        wolfpack(eng, "jobs", worker, credit=50)
    eng.publish_many("jobs", [Message(body=b"%d" % n) for n in range(500)])
    for n in range(1, len(workers) + 1):
        caused, _ = eng.absent(set(workers[:n]))
        assert caused == []
    assert eng.absent(set(workers)) == ([], [])
    jobs = eng.stats("jobs")
    assert (jobs["published"], jobs["routed"], jobs["depth"]) == (500, 500, 450)
    for worker in workers:
        stats = eng.stats(f"jobs:{worker}")
        recalled = 0 if worker == workers[-1] else 50  # the last one had nobody to give to
        assert (stats["delivered"], stats["recalled"], stats["timed_out"], stats["expired"]) == (
            50, recalled, 0, 0,
        )  # fmt: skip
    caused, revoked = eng.absent(set(workers) - {"w3"})  # w3 comes: the last one's work
    assert len(revoked) == 50 and {d.destination for d in revoked} == {workers[-1]}
    assert len(caused) == 50  # its credit's worth, the recalled ones first, redelivered
    assert {(d.destination, d.redelivered, d.delivery_count) for d in caused} == {("w3", True, 2)}


def test_work_given_back_goes_only_to_a_worker_that_is_present(eng: Engine) -> None:
    """`away` names the destinations with no consumer now (not yet for the timeout): a
    worker queue whose destinations are all away takes nothing, so work recalled from a
    stranded worker waits in the service queue for a present one."""
    for worker in ("w1", "w2", "w3"):
        wolfpack(eng, "jobs", worker, credit=2)
    sent = eng.publish_many("jobs", [Message(body=str(n).encode()) for n in range(6)])
    assert sorted(d.destination for d in sent) == ["w1", "w1", "w2", "w2", "w3", "w3"]
    caused, revoked = eng.absent({"w1"}, away={"w1", "w2", "w3"})
    assert (caused, revoked) == ([], [])  # nobody present to give w1's work to
    caused, revoked = eng.absent({"w1"}, away={"w1", "w2"})
    assert caused == [] and sorted(d.destination for d in revoked) == ["w1", "w1"]
    assert len(eng.peek("jobs")) == 2  # w3 is present but has no credit; w2 is away
    w3 = [d for d in sent if d.destination == "w3"]
    got = eng.confirm(w3[0])
    assert [(d.destination, d.message.body) for d in got] == [("w3", revoked[0].message.body)]


def test_work_given_back_to_the_pack_is_marked_redelivered_with_its_count(eng: Engine) -> None:
    """As a requeue is: the worker who takes it next sees redelivered and the count."""
    wolfpack(eng, "jobs", "w1", credit=1)
    wolfpack(eng, "jobs", "w2", credit=1)
    first, second = eng.publish_many("jobs", [Message(body=b"a"), Message(body=b"b")])
    assert (first.destination, first.redelivered, first.delivery_count) == ("w1", False, 1)
    eng.absent({"w1"})
    [again] = eng.confirm(second)
    assert (again.destination, again.message.body) == ("w2", b"a")
    assert (again.redelivered, again.delivery_count) == (True, 2)
    [requeued] = eng.reject(again)  # and the count goes on from there
    assert (requeued.redelivered, requeued.delivery_count) == (True, 3)


def test_holds_for_settlements_tells_whether_a_settlement_may_let_a_message_go(eng) -> None:
    """The service's router keeps ack:auto settlements waiting, and skips reading them
    after a step, only while no queue holds a message they might let go
    (xumpweb/runtime.py): one held for the credit a settlement gives back."""
    eng.queue_create("a")
    eng.queue_create("b")
    assert eng.holds_for_settlements(10) is False
    eng.selector_create("b").when_always().do_deliver("out").set_credit(1).enable()
    first = eng.publish("b", Message(body=b"1"))  # delivered at once: nothing held
    assert len(first) == 1 and eng.holds_for_settlements(10) is False
    assert eng.publish("b", Message(body=b"2")) == []  # no credit left: held
    assert eng.holds_for_settlements(10) is True
    eng.confirm(first[0])  # the credit comes back: "2" is delivered
    assert eng.holds_for_settlements(10) is False
    assert eng.holds_for_settlements(1) is True  # more queues than it looks at: not looked at


def test_a_message_held_without_selectors_waits_for_no_settlement(eng) -> None:
    """Held in a queue without selectors while deliveries are outstanding elsewhere: no
    settlement can let it go (their credit is another queue's), so the router need not
    look for settlements after each step."""
    eng.queue_create("held")
    eng.queue_create("b")
    eng.selector_create("b").when_always().do_deliver("out").set_credit(1).enable()
    [outstanding] = eng.publish("b", Message(body=b"1"))
    eng.publish_many("held", [Message(body=b"kept"), Message(body=b"kept too")])
    assert eng.stats("held")["depth"] == 2
    assert eng.holds_for_settlements(10) is False
    eng.publish("b", Message(body=b"2"))  # held for b's credit, which the settlement gives
    assert eng.holds_for_settlements(10) is True
    eng.confirm(outstanding)
    assert eng.holds_for_settlements(10) is False


def test_a_message_held_upstream_of_a_move_waits_for_the_settlement_downstream(eng) -> None:
    """A wolfpack's shape: the service queue's MOVE selector gets its credit back only when
    the worker queue's delivery is settled, so a message held in the service queue waits
    for that settlement."""
    eng.queue_create("service")
    eng.queue_create("worker")
    eng.selector_create("service").when_always().do_move("worker").set_credit(1).enable()
    eng.selector_create("worker").when_always().do_deliver("w").enable()
    [delivery] = eng.publish("service", Message(body=b"1"))
    assert eng.publish("service", Message(body=b"2")) == []  # the move's credit is taken
    assert eng.holds_for_settlements(10) is True
    [second] = eng.confirm(delivery)  # settled downstream: the credit comes back up
    assert second.message.body == b"2"
    assert eng.holds_for_settlements(10) is False
