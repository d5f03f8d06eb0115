"""The console's selector builder preview agrees with what the selector then takes when it
starts at the head of the history (SPEC §2 rule 13: the replay runs the selector's own
WHEN), for a filter, a topic match and a match on a numeric header."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.web.conftest import unique
from tests.web.test_subscribe import Xump, wait_for

HIDDEN = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
SUMMARY = re.compile(r"<strong>(\d+)</strong> of the last (\d+) message")


@pytest.fixture
def xump(service):
    found = Xump(service)
    yield found
    found.close()


@pytest.fixture
def console(service):
    """An httpx client logged in to the console as the admin."""
    with httpx.Client(base_url=service.url, timeout=30) as client:
        token = HIDDEN.search(client.get("/login/").text)[1]
        fields = {"csrfmiddlewaretoken": token, "username": "admin", "password": "admin-password"}
        assert client.post("/login/", data=fields).status_code == 302
        yield client


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
    csrf = HIDDEN.search(console.get(f"/queues/{queue}/selectors/new/").text)[1]
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
