"""The console's trace page: search by mid, the steps and the path; reachable from a
message's detail page; nothing of queues the person may not read; input escaped."""

from __future__ import annotations

import httpx

from tests.web.conftest import console_form, unique, wait_for


def test_a_copied_and_delivered_message_is_traced_with_its_path(service, console) -> None:
    with service.client() as api:
        source, copy = unique(), unique()
        api.post("/api/queues", json={"name": source, "history": 5})
        api.post("/api/queues", json={"name": copy})
        api.post(f"/api/queues/{source}/selectors", json={
            "when": "always", "action": "copy", "target": copy, "enabled": True})  # fmt: skip
        api.post(f"/api/queues/{source}/selectors", json={
            "when": "always", "action": "delete", "enabled": True})  # fmt: skip
        mid = api.post(f"/api/queues/{source}/publish", json={"body": "x"}).json()["mid"]
        wait_for(lambda: api.get(f"/api/messages/{mid}/trace").status_code == 200)
        history = api.get(f"/api/queues/{source}/history").json()["messages"]
    detail = console.get(f"/queues/{source}/messages/{history[0]['seq']}/").text
    assert f"/messages/trace/?mid={mid}" in detail
    page = console.get("/messages/trace/", params={"mid": mid})
    assert page.status_code == 200
    assert page.text.count('<tr data-kind="') == 3
    path = page.text[page.text.index('id="trace-path"') :]
    assert f'{source}</a> → <span class="muted">copy</span>' in path


def test_an_unknown_or_hostile_mid_is_answered_not_failed(console) -> None:
    page = console.get("/messages/trace/", params={"mid": "nope-1"})
    assert page.status_code == 200 and 'id="trace-none"' in page.text
    page = console.get("/messages/trace/", params={"mid": "<script>alert(1)</script>"})
    assert page.status_code == 200 and "<script>alert(1)" not in page.text
    page = console.get("/messages/trace/", params={"mid": "m" * 5000})
    assert page.status_code == 200 and 'role="alert"' in page.text


def test_the_trace_page_needs_a_login(service) -> None:
    with httpx.Client(base_url=service.url, timeout=30) as anonymous:
        answer = anonymous.get("/messages/trace/", params={"mid": "x"})
        assert answer.status_code == 302 and "/login/" in answer.headers["location"]


def test_the_publish_form_explains_a_test_message_without_publishing_it(service, console):
    queue, target = unique(), unique()
    with service.client() as api:
        api.post("/api/queues", json={"name": queue})
        api.post("/api/queues", json={"name": target})
        api.post(
            f"/api/queues/{queue}/selectors",
            json={
                "when": "match",
                "action": "move",
                "target": target,
                "enabled": True,
                "matches": [
                    {"operator": "eq", "pattern": "a"},
                    {"operator": "eq", "pattern": "eu", "field": "region"},
                ],
            },
        )
    page, form = console_form(
        console, f"/queues/{queue}/", address="a", headers="region: us", body="", return_address=""
    )
    assert "Explain the route (nothing is sent)" in page.text
    said = console.post(f"/queues/{queue}/explain/", data=form)
    assert said.status_code == 200
    assert "condition 2 failed: region eq eu" in said.text
    form["headers"] = "region: eu"
    form["address"] = "a"
    said = console.post(f"/queues/{queue}/explain/", data=form)
    assert f'→ <span class="mono">{target}</span>' in said.text
    form["address"] = "<b>bold</b>"
    said = console.post(f"/queues/{queue}/explain/", data=form)
    assert "<b>bold</b>" not in said.text
    with service.client() as api:
        assert api.get(f"/api/queues/{queue}/stats").json()["published"] == 0


def test_the_dead_letter_inspector_links_each_letter_to_its_trace(service, console) -> None:
    queue, dlq = unique(), unique("dlq")
    with service.client() as api:
        api.post("/api/queues", json={"name": dlq})
        api.post("/api/queues", json={"name": queue, "dead_letter": dlq})
        api.post(
            f"/api/queues/{queue}/selectors",
            json={
                "when": "match",
                "matches": [{"operator": "eq", "pattern": "never"}],
                "action": "delete",
                "enabled": True,
            },
        )
        mid = api.post(f"/api/queues/{queue}/publish", json={"address": "x"}).json()["mid"]
        wait_for(lambda: api.get(f"/api/queues/{dlq}/stats").json()["depth"] == 1)
    page = console.get("/dead-letters/")
    assert f"/messages/trace/?mid={mid}" in page.text
    trace = console.get("/messages/trace/", params={"mid": mid}).text
    assert "dead-lettered from" in trace and "unroutable" in trace
