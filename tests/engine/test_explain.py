"""SPEC §12, explain: a message routed on paper, every selector's verdict, nothing changed."""

from __future__ import annotations

import pytest

from engine import Engine, Message
from engine.errors import InvalidArgument, NotFound


def five_queues(eng: Engine) -> None:
    """in: copy audit (filter), move work (3 conditions), deliver vip (disabled), default
    → dlq. work: deliver w1 (credit 1) and w2 (credit 0). audit: history only. dlq: kept."""
    eng.queue_create("dlq", history=10)
    eng.queue_create("audit", history=10)
    eng.queue_create("work", dead_letter="dlq")
    eng.queue_create("vip")
    eng.queue_create("in", dead_letter="dlq", history=10)
    eng.selector_create("in").when_filter("amount > 100").do_copy("audit").enable()
    eng.selector_create("in").when_match("topic", "order.*").and_match(
        "eq", "desk", "return_address"
    ).and_match("eq", "eu", "region").do_move("work").enable()
    eng.selector_create("in").when_always().do_deliver("vip")  # left disabled
    eng.selector_create("in").when_default().do_move("dlq").enable()
    eng.selector_create("work").when_always().do_deliver("w1").set_credit(1).enable()
    eng.selector_create("work").when_always().do_deliver("w2").set_credit(0).enable()
    eng.selector_create("audit").when_always().do_delete()  # disabled: audit holds
    eng.selector_create("dlq").when_always().do_delete().enable()


def snapshot(eng: Engine) -> list:
    """Everything a user could see of the engine's state."""
    seen = []
    for info in eng.queues():
        name = info.name
        seen.append((
            info, eng.stats(name), eng.browse(name, start="oldest", count=100), eng.peek(name),
            [(s.spec, s.available_credit, s.outstanding) for s in eng.selectors(name)],
        ))  # fmt: skip
    return seen


def order(**headers) -> Message:
    return Message(address="order.new", return_address="desk", headers={"region": "eu", **headers})


def test_explain_gives_every_selectors_verdict_and_where_it_ends(eng: Engine) -> None:
    five_queues(eng)
    said = eng.explain("in", order(amount=500))
    first = said["steps"][0]
    assert first["queue"] == "in"
    verdicts = {v["selector"]: v for v in first["selectors"]}
    assert verdicts[1]["verdict"] == "copies" and verdicts[1]["target"] == "audit"
    assert verdicts[2]["verdict"] == "takes" and verdicts[2]["target"] == "work"
    assert verdicts[3]["reason"] == "disabled"
    assert verdicts[4]["reason"].startswith("default")
    assert first["outcome"] == {"kind": "taken", "selector": 2, "action": "move", "to": "work"}
    work = next(step for step in said["steps"] if step["queue"] == "work")
    w = {v["selector"]: v for v in work["selectors"]}
    assert w[1]["verdict"] == "takes" and w[2]["reason"] == "no credit"
    assert {"queue": "work", "outcome": "delivered", "destination": "w1", "selector": 1} in said[
        "ends"
    ]
    assert any(end["queue"] == "audit" and end["outcome"] == "held" for end in said["ends"])


def test_explain_names_the_condition_that_failed_and_the_filter_state(eng: Engine) -> None:
    five_queues(eng)
    said = eng.explain("in", Message(address="order.new", return_address="shop"))
    verdicts = {v["selector"]: v for v in said["steps"][0]["selectors"]}
    assert verdicts[1]["filter"] == "unknown"  # no amount header
    assert verdicts[2]["condition"] == 2
    assert "return_address eq desk" in verdicts[2]["reason"] and "'shop'" in verdicts[2]["reason"]
    assert verdicts[4]["verdict"] == "takes"  # the default acts: nothing else matched
    assert said["ends"][-1]["queue"] == "dlq"
    said = eng.explain("in", order(amount=5))
    assert {v["selector"]: v for v in said["steps"][0]["selectors"]}[1]["filter"] == "false"


def test_explain_says_a_message_waits_when_no_taker_has_credit(eng: Engine) -> None:
    five_queues(eng)
    eng.publish("in", order())  # w1 spends its one credit
    said = eng.explain("in", order())
    work = next(step for step in said["steps"] if step["queue"] == "work")
    assert work["outcome"]["kind"] == "waits"
    assert [v["reason"] for v in work["selectors"]] == ["no credit", "no credit"]


def test_explain_follows_a_target_from_the_envelope_and_its_failures(eng: Engine) -> None:
    eng.queue_create("dlq", history=10)
    eng.queue_create("in", dead_letter="dlq")
    eng.queue_create("b")
    eng.selector_create("in").when_always().do_move(target_from="to").enable()
    said = eng.explain("in", Message(headers={"to": "b"}))
    assert [step["queue"] for step in said["steps"]] == ["in", "b"]
    said = eng.explain("in", Message(headers={"to": "nowhere"}))
    assert said["steps"][0]["outcome"]["kind"] == "dead_lettered"
    assert said["steps"][0]["outcome"]["reason"] == "no-such-queue"
    assert said["steps"][1]["queue"] == "dlq"


def test_explain_of_a_full_queue_follows_the_overflow_rule(eng: Engine) -> None:
    eng.queue_create("dlq", history=10)
    eng.queue_create("in", limit=1, dead_letter="dlq")
    eng.selector_create("in").when_always().do_deliver("app").set_credit(0).enable()
    eng.publish("in", Message())  # waits: the queue is full now
    said = eng.explain("in", Message())
    assert said["steps"][0]["full"] is True
    assert said["steps"][0]["outcome"]["reason"] == "overflow"


def test_explain_changes_nothing(eng: Engine) -> None:
    five_queues(eng)
    eng.publish("in", order(amount=500))
    before = snapshot(eng)
    for message in (order(amount=500), order(), Message(address="x"), order(amount="x")):
        eng.explain("in", message)
    assert snapshot(eng) == before


def test_explain_changes_no_journal(engine_on, store_kind) -> None:
    eng = engine_on(store_kind, journal=True)
    five_queues(eng)
    eng.explain("in", order(amount=500))
    assert len(eng.journal) == 0


def test_explain_of_a_loop_ends(eng: Engine) -> None:
    eng.queue_create("p")
    eng.queue_create("q")
    eng.selector_create("p").when_always().do_copy("q").enable()
    eng.selector_create("q").when_always().do_copy("p").enable()
    said = eng.explain("p", Message())
    assert [step["queue"] for step in said["steps"]] == ["p", "q"]


def test_explain_refuses_what_publish_refuses(eng: Engine) -> None:
    eng.queue_create("in")
    with pytest.raises(NotFound):
        eng.explain("nowhere", Message())
    with pytest.raises(InvalidArgument):
        eng.explain("in", Message(headers={"h": float("nan")}))
    with pytest.raises(InvalidArgument):
        eng.explain("in", "not a message")  # type: ignore[arg-type]


def test_explain_uses_up_no_mid(eng: Engine) -> None:
    eng.queue_create("q")
    eng.publish("q", Message())
    eng.explain("q", Message())
    eng.explain("q", Message(mid=7))  # type: ignore[arg-type]
    eng.publish("q", Message())
    first, second = (int(m.mid.rsplit("-", 1)[1]) for m in eng.peek("q"))
    assert second == first + 1
