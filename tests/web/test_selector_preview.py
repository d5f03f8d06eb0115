# ruff: noqa: F811  (the xump fixture of test_subscribe.py, imported, is a parameter here)
"""The console's selector builder preview agrees with what the selector then takes when it
starts at the head of the history (SPEC §2 rule 13: the replay runs the selector's own
WHEN), for a filter, a topic match and a match on a numeric header."""

from __future__ import annotations

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
