"""Who may call the API: tokens with per-queue rights, and console sessions with CSRF."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.web.conftest import unique


def issue(service, rights: dict) -> str:
    with service.client() as client:
        return client.post("/api/tokens", json={"name": unique("t"), "rights": rights}).json()[
            "secret"
        ]


def test_a_missing_or_unknown_token_is_refused_with_401(service) -> None:
    for headers in (
        {},
        {"Authorization": "Bearer xump_0000_nope"},
        {"Authorization": "Basic YWRtaW46YWRtaW4="},
        {"Authorization": "Bearer"},
    ):
        answer = httpx.get(service.url + "/api/queues", headers=headers)
        assert answer.status_code == 401, headers
        assert answer.json()["error"] == "unauthorized"


def test_a_publish_token_publishes_only_where_it_may(service) -> None:
    orders, other = unique("orders"), unique("other")
    with service.client() as client:
        for name in (orders, other):
            client.post("/api/queues", json={"name": name})
    secret = issue(service, {orders: ["publish"]})
    with service.client(secret) as program:
        assert program.post(f"/api/queues/{orders}/publish", json={"body": "x"}).status_code == 202
        refused = program.post(f"/api/queues/{other}/publish", json={"body": "x"})
        assert refused.status_code == 403 and refused.json()["error"] == "forbidden"
        assert program.post("/api/queues", json={"name": unique()}).status_code == 403
        assert program.post(f"/api/queues/{orders}/selectors", json={
            "when": "always", "action": "delete"}).status_code == 403  # fmt: skip
        assert program.get(f"/api/queues/{orders}/history").status_code == 403
        assert program.delete(f"/api/queues/{orders}").status_code == 403
        listed = [q["name"] for q in program.get("/api/queues").json()["queues"]]
        assert listed == [orders]
    with service.client() as client:
        assert client.get(f"/api/queues/{orders}/stats").json()["published"] == 1
        assert client.get(f"/api/queues/{other}/stats").json()["published"] == 0


def test_a_consume_token_reads_and_confirms_but_does_not_change(service) -> None:
    queue = unique("feed")
    with service.client() as client:
        client.post("/api/queues", json={"name": queue, "history": 5})
    secret = issue(service, {"feed-*": ["consume"]})
    with service.client(secret) as program:
        assert program.get(f"/api/queues/{queue}/history").status_code == 200
        assert program.get(f"/api/queues/{queue}/stats").status_code == 200
        assert program.post(f"/api/queues/{queue}/publish", json={"body": "x"}).status_code == 403
        assert program.patch(f"/api/queues/{queue}", json={"history": 1}).status_code == 403
        # a tag of this queue passes the rights check and is then unknown; another's is 403
        assert program.post("/api/confirm", json={"tags": [f"{queue}:1:1"]}).status_code == 404
        assert program.post("/api/confirm", json={"tags": ["orders:1:1"]}).status_code == 403


@pytest.fixture
def session(service):
    """An httpx client logged in as the admin through the admin's login form."""
    client = httpx.Client(base_url=service.url, timeout=30)
    form = client.get("/admin/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
    done = client.post("/admin/login/", data={
        "username": "admin", "password": "admin-password", "csrfmiddlewaretoken": token,
        "next": "/admin/"})  # fmt: skip
    assert done.status_code == 302, done.text
    yield client
    client.close()


def test_a_session_reads_and_changes_with_csrf(service, session) -> None:
    assert session.get("/api/queues").status_code == 200
    name = unique()
    refused = session.post("/api/queues", json={"name": name})
    assert refused.status_code == 403 and refused.json()["error"] == "csrf_failed"
    csrf = session.cookies["csrftoken"]
    made = session.post("/api/queues", json={"name": name}, headers={"X-CSRFToken": csrf})
    assert made.status_code == 201, made.text
    issued = session.post("/api/tokens", json={"name": "from-console", "rights": {}},
                          headers={"X-CSRFToken": csrf})  # fmt: skip
    assert issued.status_code == 201 and issued.json()["token"]["user"] == "admin"


def test_a_token_revoked_or_narrowed_in_another_process_stops_working_at_once(service) -> None:
    """The web process remembers tokens it looked up; a change made by any other process
    (here a manage.py shell, as the admin or a script would) is seen on the next request."""
    queue = unique("orders")
    with service.client() as client:
        client.post("/api/queues", json={"name": queue})
        made = client.post(
            "/api/tokens", json={"name": unique("t"), "rights": {queue: ["publish"]}}
        )
    token, secret = made.json()["token"], made.json()["secret"]
    change = (
        "from xumpweb.wiring.models import ApiToken\n"
        "from django.utils import timezone\n"
        f"token = ApiToken.objects.get(pk={token['id']})\n"
    )
    with service.client(secret) as program:
        assert program.post(f"/api/queues/{queue}/publish", json={"body": "x"}).status_code == 202
        narrowed = service.manage("shell", "-c", change + "token.rights = {'other': ['publish']}\n"
                                  "token.save()")  # fmt: skip
        assert narrowed.returncode == 0, narrowed.stderr
        assert program.post(f"/api/queues/{queue}/publish", json={"body": "x"}).status_code == 403
        revoked = service.manage("shell", "-c", change + "token.revoked = timezone.now()\n"
                                 "token.save()")  # fmt: skip
        assert revoked.returncode == 0, revoked.stderr
        answer = program.post(f"/api/queues/{queue}/publish", json={"body": "x"})
        assert answer.status_code == 401 and answer.json()["error"] == "unauthorized"
