"""Wiring changes out of range (issue 12, item 4): refused whole with a JSON 400 before
anything changes, in the router, the catalog and the pattern records alike."""

from __future__ import annotations

import re

import httpx

from tests.web.conftest import unique

HUGE = 9223372036854775808  # 2**63: past every integer column


def assert_refused(answer: httpx.Response) -> None:
    assert answer.status_code == 400, (answer.request.url, answer.status_code, answer.text)
    assert answer.json()["error"] in ("invalid_request", "invalid_argument"), answer.text
    assert "internal" not in answer.json()["detail"]


def test_a_queue_limit_out_of_range_is_refused_and_the_router_keeps_the_old_one(service) -> None:
    queue = unique("range")
    with service.client() as client:
        assert client.post("/api/queues", json={"name": queue, "limit": 5}).status_code == 201
        for limit in (HUGE, 2**31, -1):
            assert_refused(client.patch(f"/api/queues/{queue}", json={"limit": limit}))
        assert_refused(client.patch(f"/api/queues/{queue}", json={"history": 2**31}))
        assert client.get(f"/api/queues/{queue}").json()["limit"] == 5
        # the router enforces 5 still: the sixth publish finds the queue full
        for n in range(5):
            assert client.post(f"/api/queues/{queue}/publish", json={"body": str(n)}).status_code
        assert client.post(f"/api/queues/{queue}/publish", json={"body": "6"}).status_code == 409
        # and later changes go through
        changed = client.patch(f"/api/queues/{queue}", json={"limit": 2**31 - 1, "history": 3})
        assert changed.status_code == 200, changed.text
        assert client.get(f"/api/queues/{queue}").json()["limit"] == 2**31 - 1
        assert_refused(client.post("/api/queues", json={"name": unique(), "history": HUGE}))


def test_selector_numbers_out_of_range_are_refused_and_change_nothing(service) -> None:
    queue = unique("range")
    with service.client() as client:
        client.post("/api/queues", json={"name": queue})
        made = client.post(f"/api/queues/{queue}/selectors",
                           json={"when": "always", "action": "delete", "credit": 3})  # fmt: skip
        assert made.status_code == 201, made.text
        number = made.json()["id"]
        for settings in ({"credit": 2**31}, {"credit": -2}, {"start": 2**63}, {"start": 0}):
            body = {"when": "always", "action": "delete", **settings}
            assert_refused(client.post(f"/api/queues/{queue}/selectors", json=body))
            assert_refused(client.patch(f"/api/queues/{queue}/selectors/{number}", json=settings))
        for n in (0, 2**31, HUGE):
            one = f"/api/queues/{queue}/selectors/{number}/credit"
            assert_refused(client.post(one, json={"n": n}))
        selectors = client.get(f"/api/queues/{queue}/selectors").json()["selectors"]
        assert [(s["id"], s["credit"], s["start"]) for s in selectors] == [(number, 3, "current")]


def test_a_pattern_with_credit_out_of_range_builds_nothing(service) -> None:
    with service.client() as client:
        before = client.get("/api/patterns").json()["patterns"]
        for kind, credit in (("wolfpack", 2**70), ("housecat", -1.67e20), ("wolfpack", -2)):
            router = unique("prange")
            answer = client.post("/api/patterns", json={
                "kind": kind, "name": unique("w"), "router": router, "credit": credit})  # fmt: skip
            assert_refused(answer)
            assert client.get(f"/api/queues/{router}").status_code == 404
        assert client.get("/api/patterns").json()["patterns"] == before


def test_the_console_refuses_out_of_range_settings_and_changes_nothing(service) -> None:
    queue = unique("range")
    with service.client() as client:
        client.post("/api/queues", json={"name": queue, "limit": 5})
    with httpx.Client(base_url=service.url, timeout=30, follow_redirects=True) as browser:
        page = browser.get("/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        browser.post("/login/", data={"username": "admin", "password": "admin-password",
                                      "csrfmiddlewaretoken": token})  # fmt: skip
        token = browser.cookies["csrftoken"]
        for fields in ({"limit": str(HUGE), "history": "0"}, {"limit": "5", "history": str(2**31)}):
            answer = browser.post(
                f"/queues/{queue}/settings/",
                data={"csrfmiddlewaretoken": token, "journal": "on", **fields},
            )
            assert answer.status_code == 200
            assert "Settings not saved" in answer.text and "2147483647" in answer.text
    with service.client() as client:
        assert client.get(f"/api/queues/{queue}").json()["limit"] == 5
