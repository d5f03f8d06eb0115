# ruff: noqa: F811  (the xump fixture of test_subscribe.py, imported, is a parameter here)
"""The console's selector builder preview agrees with what the selector then takes when it
starts at the head of the history (SPEC §2 rule 13: the replay runs the selector's own
WHEN), for a filter, a topic match and a match on a numeric header."""

from __future__ import annotations

import html
import re

import pytest

from tests.web.conftest import CSRF, unique
from tests.web.test_subscribe import wait_for, xump  # noqa: F401 (xump: a fixture)

SUMMARY = re.compile(r"<strong>(\d+)</strong> of the last (\d+) message")


WHENS = [
    pytest.param({"when": "filter", "filter": "priority > 5"}, 12, id="filter"),
    pytest.param(
        {"when": "match", "operator": "topic", "pattern": "orders.eu.*", "field": "address"},
        15,
        id="topic",
    ),
    pytest.param(
        {"when": "match", "operator": "eq", "pattern": "9", "field": "priority"}, 3, id="header"
    ),
]


@pytest.mark.parametrize(("when", "expected"), WHENS)
def test_the_preview_counts_what_a_late_selector_takes(service, xump, console, when, expected):
    queue, sink = unique(), unique("sink")
    xump.call("queue_create", name=queue, history=100)
    xump.call("queue_create", name=sink)
    xump.call("selector_create", queue=queue, when="always", action="delete", enabled=True)
    xump.publish(queue, [
        {"body": f"order {n}", "address": f"orders.{'eu' if n % 2 else 'us'}.x",
         "headers": {"priority": n % 10}}
        for n in range(1, 31)
    ])  # fmt: skip
    assert wait_for(lambda: xump.stats(queue)["history_size"] == 30)
    form = {"operator": "", "pattern": "", "field": "address", "filter": "", **when,
            "action": "copy", "target": sink, "credit": "-1", "start": "head"}  # fmt: skip
    csrf = CSRF.search(console.get(f"/queues/{queue}/selectors/new/").text)[1]
    answer = console.post(
        f"/queues/{queue}/selectors/preview/", data={**form, "csrfmiddlewaretoken": csrf}
    )
    assert answer.status_code == 200, answer.text
    taken, examined = (int(n) for n in SUMMARY.search(answer.text).groups())
    assert (taken, examined) == (expected, 30)
    settings = {"when": when["when"], "action": "copy", "target": sink, "start": "head",
                "enabled": True}  # fmt: skip
    if when["when"] == "filter":
        settings["filter"] = when["filter"]
    else:
        settings["match"] = {k: when[k] for k in ("operator", "pattern", "field")}
    xump.call("selector_create", queue=queue, **settings)
    assert wait_for(lambda: xump.stats(sink)["depth"] == taken)
    assert xump.stats(queue)["history_size"] == 30


def test_the_preview_lists_waiting_messages_in_priority_order(service, xump, console):
    """On a queue with priority levels, the preview shows each message's level and lists
    the waiting ones in the order the queue will route them (SPEC 8), as the queue then
    delivers them."""
    queue, sink = unique(), unique("sink")
    xump.call("queue_create", name=queue, priorities=10)
    xump.call("queue_create", name=sink)
    xump.publish(queue, [{"body": f"p{p}", "headers": {"priority": p}} for p in (1, 9, 3, 12)])
    assert wait_for(lambda: xump.stats(queue)["depth"] == 4)
    form = {"when": "always", "operator": "", "pattern": "", "field": "address", "filter": "",
            "action": "move", "target": sink, "credit": "-1", "start": "current"}  # fmt: skip
    csrf = CSRF.search(console.get(f"/queues/{queue}/selectors/new/").text)[1]
    answer = console.post(
        f"/queues/{queue}/selectors/preview/", data={**form, "csrfmiddlewaretoken": csrf}
    )
    assert answer.status_code == 200, answer.text
    assert "10 priority levels" in answer.text
    rows = re.findall(r'<td class="num">(\d+)</td><td class="mono">', answer.text)
    assert rows == ["9", "9", "3", "1"]  # 12 is clamped to the top level, then FIFO
    xump.call("selector_create", queue=queue, when="always", action="move", target=sink,
              enabled=True)  # fmt: skip
    assert wait_for(lambda: xump.stats(sink)["depth"] == 4)
    assert [m["body"] for m in xump.waiting(sink)] == ["p9", "p12", "p3", "p1"]


# -- why not: the messages the selector would not take, in explain's words (SPEC §12) ---------
NOT_TAKEN = re.compile(r'<li data-seq="(\d+)">(.*?)</li>', re.S)
BLANK = {"operator": "", "pattern": "", "field": "address", "filter": "", "action": "delete",
         "target": "", "credit": "-1", "start": "current"}  # fmt: skip


def preview(console, queue: str, form: dict) -> str:
    """The preview's HTML for the selector in `form` (a list for a field the builder
    repeats: its rows of conditions)."""
    csrf = CSRF.search(console.get(f"/queues/{queue}/selectors/new/").text)[1]
    answer = console.post(
        f"/queues/{queue}/selectors/preview/", data={**form, "csrfmiddlewaretoken": csrf}
    )
    assert answer.status_code == 200, answer.text
    return answer.text


def not_taken(text: str) -> dict[int, str]:
    """{seq: the line as a person reads it} of the preview's "Not taken" part."""
    return {
        int(seq): html.unescape(re.sub(r"<[^>]+>", "", line)).strip()
        for seq, line in NOT_TAKEN.findall(text)
    }


def held(xump, queue: str, messages: list[dict]) -> None:
    """Publish `messages` to `queue`, which has no enabled selector: they wait there."""
    xump.publish(queue, messages)
    assert wait_for(lambda: xump.stats(queue)["depth"] == len(messages))


def test_the_preview_names_the_condition_each_message_fails(service, xump, console):
    queue = unique()
    xump.call("queue_create", name=queue)
    held(xump, queue, [
        {"body": "1", "address": "orders.us.x", "return_address": "desk",
         "headers": {"region": "eu"}},
        {"body": "2", "address": "orders.eu.x", "return_address": "shop",
         "headers": {"region": "eu"}},
        {"body": "3", "address": "orders.eu.x", "return_address": "desk"},
        {"body": "4", "address": "orders.eu.x", "return_address": "desk",
         "headers": {"region": "us"}},
        {"body": "5", "address": "orders.eu.x", "return_address": "desk",
         "headers": {"region": "eu"}},
    ])  # fmt: skip
    form = {**BLANK, "when": "match", "operator": "topic", "pattern": "orders.eu.*",
            "more_operator": ["eq", "eq"], "more_pattern": ["desk", "eu"],
            "more_field": ["return_address", "region"]}  # fmt: skip
    text = preview(console, queue, form)
    assert SUMMARY.search(text).groups() == ("1", "5")
    assert "Not taken (4)" in text
    why = not_taken(text)
    assert sorted(why) == [1, 2, 3, 4]  # 5 meets all three: it is taken, not listed
    assert "condition 1 failed: address topic orders.eu.* (it is 'orders.us.x')" in why[1]
    assert "condition 2 failed: return_address eq desk (it is 'shop')" in why[2]
    assert "condition 3 failed: region eq eu (it has none)" in why[3]
    assert "condition 3 failed: region eq eu (it is 'us')" in why[4]
    assert "orders.us.x" in why[1]  # each line names the message by its address too
    assert text.count("<tbody>") == 1 and text.count("<tr><td") == 1  # taken: one row


def test_the_preview_says_when_the_filter_is_false_or_unknown(service, xump, console):
    queue = unique()
    xump.call("queue_create", name=queue)
    held(xump, queue, [
        {"body": "high", "address": "a", "headers": {"amount": 900}},
        {"body": "low", "address": "b", "headers": {"amount": 20}},
        {"body": "none", "address": "c"},
        {"body": "text", "address": "d", "headers": {"amount": "lots"}},
    ])  # fmt: skip
    text = preview(console, queue, {**BLANK, "when": "filter", "filter": "amount > 500"})
    assert SUMMARY.search(text).groups() == ("1", "4")
    why = not_taken(text)
    assert sorted(why) == [2, 3, 4]
    assert why[2].endswith("filter is FALSE")
    unknown = "filter is UNKNOWN (a header it reads is missing or of another kind)"
    assert why[3].endswith(unknown) and why[4].endswith(unknown)
    # a match and a filter: the conditions are judged first, then the filter
    form = {**BLANK, "when": "match", "operator": "prefix", "pattern": "b",
            "filter": "amount > 500"}  # fmt: skip
    why = not_taken(preview(console, queue, form))
    assert why[1].endswith("condition 1 failed: address prefix b (it is 'a')")
    assert why[2].endswith("filter is FALSE")


def test_a_default_preview_names_the_selector_that_matches_instead(service, xump, console):
    queue, sink = unique(), unique("sink")
    xump.call("queue_create", name=queue, history=100)
    xump.call("queue_create", name=sink)
    first = xump.call("selector_create", queue=queue, when="always", action="delete",
                      enabled=True)  # fmt: skip
    xump.publish(queue, [{"body": f"{n}", "address": f"orders.{'eu' if n % 2 else 'us'}"}
                         for n in range(1, 7)])  # fmt: skip
    assert wait_for(lambda: xump.stats(queue)["history_size"] == 6)
    xump.call("selector_update", queue=queue, id=first["id"], enabled=False)  # it counts not
    match = xump.call("selector_create", queue=queue, when="match", action="copy", target=sink,
                      match={"operator": "eq", "pattern": "orders.eu", "field": "address"},
                      enabled=True)  # fmt: skip
    text = preview(console, queue, {**BLANK, "when": "default"})
    assert SUMMARY.search(text).groups() == ("3", "6")
    why = not_taken(text)
    assert sorted(why) == [1, 3, 5]  # the orders.eu ones: the match selector copies them
    for line in why.values():
        assert "default: acts only when no other selector matches" in line
        assert f"selector {match['id']} matches it" in line
    # overflow: none of them arrived at a full queue
    why = not_taken(preview(console, queue, {**BLANK, "when": "overflow"}))
    assert sorted(why) == [1, 2, 3, 4, 5, 6]
    assert all(
        line.endswith("overflow: acts only on a message arriving at a full queue")
        for line in why.values()
    )
    # always takes them all: nothing to explain
    text = preview(console, queue, {**BLANK, "when": "always"})
    assert SUMMARY.search(text).groups() == ("6", "6") and not_taken(text) == {}
    assert "Not taken" not in text


HOSTILE = [
    pytest.param({"when": "match", "operator": "regex", "pattern": "(a+)+$", "field": "big"},
                 "condition 1 failed", id="catastrophic-regex"),
    pytest.param({"when": "match", "operator": "regex", "pattern": "(a)\\1", "field": "big"},
                 "not supported", id="backreference"),
    pytest.param({"when": "match", "operator": "eq", "pattern": "x" * 1001, "field": "big"},
                 "at most 1000 characters", id="pattern-too-long"),
    pytest.param({"when": "filter", "filter": "(" * 5000 + "big = 'a'" + ")" * 5000},
                 "nests deeper than", id="deep-filter"),
]  # fmt: skip


@pytest.mark.parametrize(("when", "said"), HOSTILE)
def test_the_preview_survives_hostile_selectors_and_messages(service, xump, console, when, said):
    """A header far too long to show, a regex built to backtrack: the reason shows the
    value cut short, and what cannot be judged is told as an error, never a 500."""
    queue = unique()
    xump.call("queue_create", name=queue)
    held(xump, queue, [{"body": "b", "address": "a", "headers": {"big": "a" * 50_000 + "!"}}])
    text = preview(console, queue, {**BLANK, **when})
    assert said in text
    if "failed" in said:
        [line] = not_taken(text).values()
        assert len(line) < 400 and "(it is 'aaaa" in line
    else:
        assert 'role="alert"' in text and "<li" not in text


def test_the_preview_refuses_a_lone_surrogate_with_a_clear_error(service, xump, console):
    """A surrogate sent UTF-8 encoded (no valid UTF-8) arrives as replacement characters;
    a condition on a field of them is refused in words, not with a 500."""
    queue = unique()
    xump.call("queue_create", name=queue)
    held(xump, queue, [{"body": "b", "address": "a"}])
    csrf = CSRF.search(console.get(f"/queues/{queue}/selectors/new/").text)[1]
    body = (f"csrfmiddlewaretoken={csrf}&when=match&operator=eq&field=address&action=delete"
            "&credit=-1&start=current&pattern=%ED%A0%80&more_operator=eq"
            "&more_pattern=%5Cud800&more_field=%ED%A0%80")  # fmt: skip
    answer = console.post(
        f"/queues/{queue}/selectors/preview/",
        content=body.encode(),
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert answer.status_code == 200, answer.text
    assert 'role="alert"' in answer.text and "field" in answer.text


# -- the preview's cap: hostile or careless wiring must not hold a web worker ------------------
CUT = re.compile(r'<div class="flash" id="preview-cut" role="status">(.*?)</div>', re.S)


def test_a_preview_too_costly_is_cut_short_and_says_so(service, xump, console):
    """A DEFAULT selector's preview tries each of the queue's other enabled selectors on every
    message: hundreds of regexes over long headers is more than a preview may read (before,
    1,000 of them took 22 s). It answers with the messages it judged, the latest first, and
    a note saying it was cut short and why; never a 500."""
    queue = unique()
    xump.call("queue_create", name=queue, history=100)
    first = xump.call("selector_create", queue=queue, when="always", action="delete",
                      enabled=True)  # fmt: skip
    big = "a" * 20_000 + "!"  # (a+)+ never holds for it: each regex reads it to the end
    xump.publish(queue, [{"body": f"{n}", "address": f"m{n}", "headers": {"big": big}}
                         for n in range(100)], chunk=10)  # fmt: skip
    assert wait_for(lambda: xump.stats(queue)["history_size"] == 100)
    for n in range(300):
        xump.call("selector_create", queue=queue, when="match", action="delete", enabled=True,
                  match={"operator": "regex", "pattern": f"(a+)+b{n}", "field": "big"})  # fmt: skip

    text = preview(console, queue, {**BLANK, "when": "default"})
    assert "Traceback" not in text
    cut = re.search(r"<strong>(\d+)</strong> of the (\d+) messages? judged before the "
                    r"preview was cut short", text)  # fmt: skip
    assert cut is not None and SUMMARY.search(text) is None  # not "of the last N"
    taken, examined = (int(n) for n in cut.groups())
    assert examined < 100, examined  # cut short: the latest ones only
    [note] = CUT.findall(text)
    note = html.unescape(re.sub(r"<[^>]+>", "", note))
    assert "cut short" in note and f"{examined} of the latest 100" in note, note
    assert "301 other enabled selectors" in note, note  # what made it costly: 300 + delete
    # what it judged it shows in full: each examined message either taken or explained
    why = not_taken(text)
    assert taken == 0 and len(why) == examined, (taken, len(why), examined)
    assert sorted(why, reverse=True) == list(range(100, 100 - examined, -1))
    assert all(f"selector {first['id']} matches it" in line for line in why.values())


def test_cheap_conditions_on_long_headers_are_not_cut_short(service, xump, console):
    """A condition is charged what its operator reads: an equality or a prefix compares no
    more than its pattern. Before, each was charged its whole field, so a DEFAULT selector
    beside 101 prefix selectors over 1 MB headers was cut short at its first message (an
    adversarial probe), its work a fraction of a second."""
    queue = unique()
    xump.call("queue_create", name=queue, history=5)
    xump.call("selector_create", queue=queue, when="always", action="delete", enabled=True)
    big = "b" * 1_000_000
    xump.publish(queue, [{"body": f"{n}", "address": f"m{n}", "headers": {"big": big}}
                         for n in range(3)])  # fmt: skip
    assert wait_for(lambda: xump.stats(queue)["history_size"] == 3)
    for n in range(101):
        xump.call("selector_create", queue=queue, when="match", action="delete", enabled=True,
                  match={"operator": "prefix", "pattern": f"a{n}", "field": "big"})  # fmt: skip

    text = preview(console, queue, {**BLANK, "when": "default"})
    assert CUT.search(text) is None, CUT.search(text)
    # every message judged (the ALWAYS selector holds for each: the default takes none)
    assert SUMMARY.search(text).groups() == ("0", "3")
