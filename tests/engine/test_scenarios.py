"""End-to-end scenarios of SPEC §2 through the public engine API (the lead's own set; the
per-rule suites live beside it)."""

from __future__ import annotations

import threading

import pytest

from engine import Engine, Message
from engine.errors import InvalidSelector, NotFound, QueueFull
from engine.patterns import parrot, wolfpack


@pytest.fixture
def engine(eng: Engine) -> Engine:
    return eng


def deliver_all(eng: Engine, queue: str, destination: str, credit: int = -1):
    return eng.selector_create(queue).when_always().do_deliver(destination).set_credit(credit)


def test_deleting_selector_returns_five_outstanding_in_order_to_another_selector(engine):
    engine.queue_create("orders")
    first = deliver_all(engine, "orders", "alice")
    first.enable()
    sent = [engine.publish("orders", Message(body=str(n)))[0] for n in range(5)]
    second = deliver_all(engine, "orders", "bob")
    second.set_credit(0)
    second.enable()
    assert first.outstanding == 5
    assert engine.selector_delete("orders", first.id) == []  # bob has no credit yet
    assert engine.queue_fetch("orders").depth == 5
    again = second.credit(10)
    assert [d.message.body for d in again] == [b"0", b"1", b"2", b"3", b"4"]
    assert all(d.redelivered and d.delivery_count == 2 for d in again)
    with pytest.raises(NotFound):
        engine.confirm(sent[0])


def test_three_hop_move_chain_returns_credit_to_the_top_when_confirmed_at_the_end(engine):
    for name in ("a", "b", "c", "d"):
        engine.queue_create(name, history=10)
    movers = []
    for source, target in (("a", "b"), ("b", "c"), ("c", "d")):
        sel = engine.selector_create(source).when_always().do_move(target).set_credit(1)
        sel.enable()
        movers.append(sel)
    deliver_all(engine, "d", "app").enable()
    first = engine.publish("a", Message(body=b"1"))
    assert engine.publish("a", Message(body=b"2")) == []
    assert [s.available_credit for s in movers] == [0, 0, 0]
    assert engine.queue_fetch("a").depth == 1
    second = engine.confirm(first[0])
    assert [d.message.body for d in second] == [b"2"]
    assert [m.body for m in engine.browse("a")] == [b"1"]
    assert [m.body for m in engine.browse("d")] == [b"1"]
    engine.confirm(second[0])
    assert [s.available_credit for s in movers] == [1, 1, 1]
    assert [s.outstanding for s in movers] == [0, 0, 0]


def test_reject_with_requeue_redelivers_first_and_without_goes_to_dead_letter(engine):
    engine.queue_create("dlq")
    engine.queue_create("work", dead_letter="dlq")
    deliver_all(engine, "work", "w", credit=1).enable()
    first = engine.publish("work", Message(body=b"a"))[0]
    engine.publish("work", Message(body=b"b"))
    again = engine.reject(first, requeue=True)
    assert [(d.message.body, d.redelivered, d.delivery_count) for d in again] == [(b"a", True, 2)]
    following = engine.reject(again[0], requeue=False)
    assert [d.message.body for d in following] == [b"b"]
    dead = engine.peek("dlq")
    assert [(m.body, m.headers["x-reason"], m.headers["x-original-queue"]) for m in dead] == [
        (b"a", "rejected", "work")
    ]


def test_start_at_head_replays_history_to_the_new_selector_only(engine):
    engine.queue_create("feed", history=100)
    engine.queue_create("old")
    engine.selector_create("feed").when_always().do_copy("old").enable()
    for n in range(3):
        engine.publish("feed", Message(body=str(n)))
    late = deliver_all(engine, "feed", "late", credit=2).start_at("head")
    replayed = late.enable()
    assert [d.message.body for d in replayed] == [b"0", b"1"]
    live = engine.publish("feed", Message(body=b"3"))
    assert live == []  # still catching up: live traffic waits
    rest = engine.confirm(replayed[0])
    assert [d.message.body for d in rest] == [b"2"]
    tail = engine.confirm(replayed[1]) + engine.confirm(rest[0])
    assert [d.message.body for d in tail] == [b"3"]
    assert engine.queue_fetch("old").depth == 4  # the copy selector saw each message once
    assert [m.body for m in engine.browse("feed", start="oldest")][:3] == [b"0", b"1", b"2"]


def test_full_queue_raises_queue_full_then_overflow_selector_takes_over(engine):
    engine.queue_create("small", limit=2)
    engine.queue_create("spill")
    engine.publish("small", Message(body=b"1"))
    engine.publish("small", Message(body=b"2"))
    with pytest.raises(QueueFull):
        engine.publish("small", Message(body=b"3"))
    assert engine.queue_fetch("small").depth == 2
    engine.selector_create("small").when_overflow().do_move("spill").enable()
    engine.publish("small", Message(body=b"3"))
    assert [m.body for m in engine.peek("spill")] == [b"3"]
    assert engine.queue_fetch("small").depth == 2  # overflow selectors do not route


def test_a_batch_into_a_full_queue_is_refused_when_its_overflow_selectors_cannot_take_it(engine):
    """Rule 7 as `publish` has it, for `publish_many` (the service's publishes): a message
    arriving at a full queue that no overflow selector can take (no credit left) and that
    has no dead-letter queue is refused, the batch whole; the batch path dropped it."""
    engine.queue_create("full", limit=1)
    engine.queue_create("spill")
    engine.selector_create("full").when_overflow().do_move("spill").set_credit(1).enable()
    engine.publish("full", Message(body=b"waits"))
    with pytest.raises(QueueFull, match="overflow selectors take 1"):
        engine.publish_many("full", [Message(body=b"2"), Message(body=b"3")])
    assert [m.body for m in engine.peek("spill")] == [] and engine.queue_fetch("full").depth == 1
    engine.publish_many("full", [Message(body=b"2")])  # the credit it has: taken
    assert [m.body for m in engine.peek("spill")] == [b"2"]
    with pytest.raises(QueueFull):
        engine.publish_many("full", [Message(body=b"3")])
    assert [m.body for m in engine.peek("spill")] == [b"2"]
    assert engine.queue_fetch("full").depth == 1


def test_bounce_sends_to_return_address_and_keeps_original_address(engine):
    engine.queue_create("in")
    engine.queue_create("back")
    engine.selector_create("in").when_match("eq", "bad").do_bounce("back").enable()
    engine.publish("in", Message(address="bad", return_address="reply.me", body=b"x"))
    bounced = engine.peek("back")[0]
    assert bounced.address == "reply.me"
    assert bounced.headers["x-original-address"] == "bad"


def test_history_pages_forward_and_backward_over_1000_messages_without_gap(engine):
    engine.queue_create("h", history=1000)
    engine.selector_create("h").when_always().do_delete().enable()
    engine.publish_many("h", [Message(body=str(n)) for n in range(1000)])
    seen, page = [], engine.browse("h", start="oldest", count=64)
    while page:
        seen.extend(m.seq for m in page)
        page = engine.browse("h", after=page[-1].seq, count=64)
    assert seen == list(range(1, 1001))
    back, page = [], engine.browse("h", start="latest", count=64)
    while page:
        back.extend(m.seq for m in page)
        page = engine.browse("h", before=page[-1].seq, count=64)
    assert back == list(range(1000, 0, -1))


def test_parrot_subscriber_with_two_matching_topics_gets_each_message_once(engine):
    parrot(engine, "ann", "stock.#")
    parrot(engine, "ann", "#.price")
    parrot(engine, "bo", "stock.*.volume")
    got = engine.publish("parrot", Message(address="stock.ibm.price"))
    assert [d.destination for d in got] == ["ann"]


def test_move_cycle_is_stopped_within_one_publish(engine):
    engine.queue_create("ping")
    engine.queue_create("pong")
    engine.selector_create("ping").when_always().do_move("pong").enable()
    engine.selector_create("pong").when_always().do_move("ping").enable()
    assert engine.publish("ping", Message(body=b"loop")) == []
    assert engine.stats("pong")["dropped"] == 1


def test_enable_without_when_or_do_is_refused_and_changes_nothing(engine):
    engine.queue_create("q")
    sel = engine.selector_create("q")
    with pytest.raises(InvalidSelector, match="no WHEN"):
        sel.enable()
    sel.when_always()
    with pytest.raises(InvalidSelector, match="no DO"):
        sel.enable()
    assert not sel.enabled


def test_threads_publishing_and_confirming_keep_every_message_exactly_once(engine, store_kind):
    # each call is a commit: PostgreSQL's cost about 2 ms each here, so fewer of them
    each = 600 if store_kind == "postgresql" else 2000  # publishes per publisher thread
    for worker in ("w1", "w2", "w3"):
        wolfpack(engine, "jobs", worker, credit=5)
    lock = threading.Lock()
    pending: list = []
    confirmed: list[bytes] = []
    done = threading.Event()

    def publisher(offset: int) -> None:
        for n in range(each):
            found = engine.publish("jobs", Message(body=f"{offset}-{n}".encode()))
            with lock:
                pending.extend(found)

    def confirmer() -> None:
        while not done.is_set() or pending:
            with lock:
                batch, pending[:] = pending[:], []
            for delivery in batch:
                confirmed.append(delivery.message.body)
                more = engine.confirm(delivery)
                with lock:
                    pending.extend(more)

    publishers = [threading.Thread(target=publisher, args=(n,)) for n in range(3)]
    confirmers = [threading.Thread(target=confirmer) for _ in range(2)]
    for thread in publishers + confirmers:
        thread.start()
    for thread in publishers:
        thread.join()
    done.set()
    for thread in confirmers:
        thread.join()
    assert sorted(confirmed) == sorted(f"{o}-{n}".encode() for o in range(3) for n in range(each))
    assert engine.stats("jobs")["outstanding"] == 0
    assert engine.queue_fetch("jobs").depth == 0
