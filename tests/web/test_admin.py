"""The Django admin, as an operator uses it in a browser (httpx with a session and CSRF):
wiring changes go through the router's engine, engine errors show on the form, every
change is audited, tokens show their secret once and can be revoked."""

from __future__ import annotations

import html
import json
import re

import httpx
import pytest

from engine import Message
from engine.errors import NotFound
from tests.web.conftest import take_from_relay, unique

HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)"')


@pytest.fixture(scope="module")
def browser(service):
    """A logged-in admin session."""
    with httpx.Client(base_url=service.url, timeout=30) as client:
        page = client.get("/admin/login/")
        form = dict(HIDDEN.findall(page.text))
        form.update(username="admin", password="admin-password", next="/admin/")
        answer = client.post("/admin/login/", data=form)
        assert answer.status_code == 302 and answer.headers["location"] == "/admin/"
        yield client


def submit(browser: httpx.Client, path: str, fields: dict) -> httpx.Response:
    """Fill the admin form at `path` as a browser would (its hidden fields included)."""
    form = dict(HIDDEN.findall(browser.get(path).text))
    form.update(fields)
    return browser.post(path, data=form)


def errors(page: httpx.Response) -> str:
    found = re.findall(r'<ul class="errorlist[^"]*"[^>]*>(.*?)</ul>', page.text, re.S)
    return html.unescape(" ".join(re.sub(r"<[^>]+>", " ", item) for item in found))


def row_id(browser: httpx.Client, model: str, search: str) -> str:
    page = browser.get(f"/admin/wiring/{model}/", params={"q": search})
    [found] = set(re.findall(rf'href="/admin/wiring/{model}/(\d+)/change/', page.text))
    return found


def revoke(browser: httpx.Client, token: str) -> None:
    """Revoke the token named `token` with the list's action, as an operator does."""
    chosen = row_id(browser, "apitoken", token)
    answer = submit(browser, "/admin/wiring/apitoken/",
                    {"action": "revoke", "_selected_action": chosen})  # fmt: skip
    assert answer.status_code == 302


def audit_actions(browser: httpx.Client, subject: str) -> list[str]:
    page = browser.get("/admin/wiring/auditevent/", params={"q": subject})
    return re.findall(r'<td class="field-action">([^<]+)</td>', page.text)


def test_it_requires_login(service):
    answer = httpx.get(service.url + "/admin/wiring/queue/")
    assert answer.status_code == 302 and "/admin/login/" in answer.headers["location"]


def test_it_creates_a_queue_through_the_engine_and_audits_it(browser, relay):
    name = unique()
    answer = submit(browser, "/admin/wiring/queue/add/",
                    {"name": name, "history": "25", "limit": "100", "_save": "Save"})  # fmt: skip
    assert answer.status_code == 302, errors(answer)
    queue = relay.call("queue_get", name=name)
    assert (queue["history"], queue["limit"], queue["store"]) == (25, 100, relay.store)
    assert name in browser.get("/admin/wiring/queue/").text
    assert audit_actions(browser, name) == ["queue.create"]


def test_it_changes_a_queue_through_the_engine(browser, relay):
    name = unique()
    relay.call("queue_create", name=name, history=5)
    path = f"/admin/wiring/queue/{row_id(browser, 'queue', name)}/change/"
    answer = submit(browser, path, {"history": "50", "limit": "", "_save": "Save"})
    assert answer.status_code == 302, errors(answer)
    assert relay.call("queue_get", name=name)["history"] == 50
    assert audit_actions(browser, name) == ["queue.update"]


def test_an_engine_error_shows_on_the_queue_form(browser, relay):
    answer = submit(browser, "/admin/wiring/queue/add/",
                    {"name": "$reserved", "history": "0", "_save": "Save"})  # fmt: skip
    assert answer.status_code == 200
    assert "reserved" in errors(answer)
    with pytest.raises(NotFound):
        relay.call("queue_get", name="$reserved")


def test_an_invalid_selector_filter_shows_its_column_not_a_500(browser, relay):
    name = unique()
    relay.call("queue_create", name=name)
    answer = submit(browser, "/admin/wiring/selector/add/", {
        "queue": row_id(browser, "queue", name), "when": "match",
        "filter": "priority >> 5", "action": "deliver", "target": "someone",
        "start": "current", "credit": "-1", "match_field": "address", "_save": "Save",
    })  # fmt: skip
    assert answer.status_code == 200
    assert "column" in errors(answer)
    assert relay.call("selectors", queue=name) == []


def test_a_selector_saved_in_the_admin_routes_and_deleting_it_stops(browser, relay):
    name, destination = unique(), unique("d")
    relay.call("queue_create", name=name)
    answer = submit(browser, "/admin/wiring/selector/add/", {
        "queue": row_id(browser, "queue", name), "when": "match", "match_operator": "topic",
        "match_pattern": "orders.#", "match_field": "address", "filter": "priority > 5",
        "action": "deliver", "target": destination, "start": "current", "credit": "-1",
        "enabled": "on", "_save": "Save",
    })  # fmt: skip
    assert answer.status_code == 302, errors(answer)
    relay.publish_many(name, [
        Message(address="orders.eu", headers={"priority": 7}, body=b"taken"),
        Message(address="orders.eu", headers={"priority": 1}, body=b"not taken"),
    ])  # fmt: skip
    [delivery] = take_from_relay(relay, destination, 1)
    assert delivery.message.body == b"taken"
    relay.confirm([delivery])

    selector = row_id(browser, "selector", name)
    answer = submit(browser, f"/admin/wiring/selector/{selector}/change/", {
        "when": "always", "match_field": "address", "action": "deliver",
        "target": destination, "start": "current", "credit": "-1", "enabled": "on",
        "_save": "Save",
    })  # fmt: skip
    assert answer.status_code == 302, errors(answer)
    [changed] = relay.call("selectors", queue=name)
    assert (changed["when"], changed["match"], changed["filter"]) == ("always", None, None)

    answer = submit(browser, f"/admin/wiring/selector/{selector}/delete/", {"post": "yes"})
    assert answer.status_code == 302
    assert relay.call("selectors", queue=name) == []
    assert audit_actions(browser, f"{name}#1") == [
        "selector.delete",
        "selector.update",
        "selector.create",
    ]


def test_a_pattern_builds_its_wiring_and_deleting_it_removes_what_it_built(browser, relay):
    router, subscriber = unique("news"), unique("reader")
    answer = submit(browser, "/admin/wiring/pattern/add/", {
        "kind": "parrot", "router": router, "name": subscriber, "topic": "sport.*",
        "credit": "1", "_save": "Save",
    })  # fmt: skip
    assert answer.status_code == 302, errors(answer)
    private = relay.call("queue_get", name=f"{router}:{subscriber}")
    assert [s["action"] for s in private["selectors"]] == ["deliver"]
    relay.publish(router, Message(address="sport.tennis", body=b"match point"))
    [delivery] = take_from_relay(relay, subscriber, 1)
    assert delivery.message.body == b"match point"
    relay.confirm([delivery])

    pattern = row_id(browser, "pattern", subscriber)
    answer = submit(browser, f"/admin/wiring/pattern/{pattern}/delete/", {"post": "yes"})
    assert answer.status_code == 302
    with pytest.raises(NotFound):
        relay.call("queue_get", name=f"{router}:{subscriber}")
    assert relay.call("selectors", queue=router) == []


def test_a_token_shows_its_secret_once_and_can_be_revoked(browser):
    name = unique("token")
    rights = json.dumps({"orders.*": ["publish"]})
    answer = submit(browser, "/admin/wiring/apitoken/add/",
                    {"name": name, "rights": rights, "_save": "Save"})  # fmt: skip
    assert answer.status_code == 302, errors(answer)
    shown = browser.get(answer.headers["location"]).text
    assert len(re.findall(r"xump_[0-9a-f]{8}_[\w-]+", shown)) == 1
    assert not re.search(r"xump_[0-9a-f]{8}_[\w-]+", browser.get("/admin/wiring/apitoken/").text)

    revoke(browser, name)
    listed = browser.get("/admin/wiring/apitoken/", params={"q": name}).text
    assert "revoked" in listed
    assert audit_actions(browser, name) == ["token.revoke", "token.create"]


def test_the_lists_filter_queues_by_dead_letter_queue_and_tokens_by_state(browser, relay):
    prefix = unique("filtered")
    relay.call("queue_create", name=f"{prefix}-plain")
    relay.call("queue_create", name=f"{prefix}-guarded", dead_letter=f"{prefix}-plain")

    def listed(model: str, **chosen: str) -> list[str]:
        page = browser.get(f"/admin/wiring/{model}/", params={"q": prefix, **chosen})
        assert page.status_code == 200
        return sorted(re.findall(rf'class="field-name"><a [^>]*>({prefix}-\w+)</a>', page.text))

    assert listed("queue") == [f"{prefix}-guarded", f"{prefix}-plain"]
    assert listed("queue", dead_letter="yes") == [f"{prefix}-guarded"]
    assert listed("queue", dead_letter="no") == [f"{prefix}-plain"]
    for name in (f"{prefix}-live", f"{prefix}-revoked"):
        fields = {"name": name, "rights": '{"*": ["read"]}', "_save": "Save"}
        assert submit(browser, "/admin/wiring/apitoken/add/", fields).status_code == 302
    revoke(browser, f"{prefix}-revoked")
    assert listed("apitoken", state="live") == [f"{prefix}-live"]
    assert listed("apitoken", state="revoked") == [f"{prefix}-revoked"]


def test_bad_token_rights_are_a_form_error(browser):
    fields = {"name": unique("token"), "rights": '{"*": ["fly"]}', "_save": "Save"}
    answer = submit(browser, "/admin/wiring/apitoken/add/", fields)
    assert answer.status_code == 200
    assert "rights among read, publish, consume, manage" in errors(answer)


def test_the_audit_log_is_read_only(browser):
    assert browser.get("/admin/wiring/auditevent/add/").status_code == 403
    assert browser.get("/admin/wiring/auditevent/").status_code == 200


INPUT = re.compile(r'<input type="(?:text|hidden|email)" name="([^"]+)" value="([^"]*)"')


def test_an_admin_grants_queues_and_roles_and_both_are_audited(service, browser):
    """Queue grants and group membership (the roles of xumpweb/access.py) are edited in
    the admin; each change leaves an audit entry."""
    name = unique("op")
    made = service.manage("shell", "-c", "from django.contrib.auth.models import User\n"
                          f"print(User.objects.create_user({name!r}).pk)")  # fmt: skip
    user = made.stdout.strip().splitlines()[-1]
    grant = {"user": user, "queues": "jobs*", "rights": ["publish", "manage"], "_save": "Save"}
    answer = submit(browser, "/admin/wiring/queuegrant/add/", grant)
    assert answer.status_code == 302, errors(answer)
    refused = submit(browser, "/admin/wiring/queuegrant/add/", {
        "queues": "jobs*", "rights": ["publish"], "_save": "Save"})  # fmt: skip
    assert "grant to one user or one group" in errors(refused)

    page = browser.get(f"/admin/auth/user/{user}/change/").text
    operator = re.search(r'<option value="(\d+)">operator</option>', page).group(1)
    form = {key: html.unescape(value) for key, value in INPUT.findall(page)}
    form.update(groups=operator, is_active="on", _save="Save")
    form["queue_grants-0-rights"] = re.findall(  # the grant, shown inline: kept as it is
        r'name="queue_grants-0-rights" value="(\w+)"[^>]*checked', page
    )
    answer = browser.post(f"/admin/auth/user/{user}/change/", data=form)
    assert answer.status_code == 302, errors(answer)
    assert audit_actions(browser, name) == ["user.role", "grant.create"]


def test_wiring_numbers_out_of_range_are_form_errors_and_change_nothing(browser, relay):
    name = unique()
    relay.call("queue_create", name=name, limit=5)
    path = f"/admin/wiring/queue/{row_id(browser, 'queue', name)}/change/"
    for fields in ({"limit": str(2**63)}, {"limit": str(2**31)}, {"history": str(2**31)}):
        answer = submit(browser, path, {"history": "0", "limit": "5", **fields, "_save": "Save"})
        assert answer.status_code == 200 and "less than or equal to 2147483647" in errors(answer)
    assert relay.call("queue_get", name=name)["limit"] == 5
    router = unique("jobs")
    for kind, credit in (("wolfpack", str(2**70)), ("housecat", "-167000000000000000000")):
        answer = submit(browser, "/admin/wiring/pattern/add/", {
            "kind": kind, "router": router, "name": unique("w"), "credit": credit,
            "_save": "Save",
        })  # fmt: skip
        assert answer.status_code == 200 and "credit" in answer.text, errors(answer)
        assert errors(answer)
        with pytest.raises(NotFound):
            relay.call("queue_get", name=router)


def test_the_queue_form_sets_the_lifetime_options_and_refuses_bad_ones(browser, relay):
    name = unique()
    answer = submit(browser, "/admin/wiring/queue/add/", {
        "name": name, "history": "0", "max_deliveries": "3", "redelivery_delay": "0.5",
        "redelivery_backoff": "2", "redelivery_delay_max": "4", "ttl": "60",
        "priorities": "5", "_save": "Save"})  # fmt: skip
    assert answer.status_code == 302, errors(answer)
    queue = relay.call("queue_get", name=name)
    assert (queue["max_deliveries"], queue["redelivery_delay"], queue["redelivery_backoff"],
            queue["redelivery_delay_max"], queue["ttl"], queue["priorities"]) == (
        3, 0.5, 2.0, 4.0, 60.0, 5)  # fmt: skip
    path = f"/admin/wiring/queue/{row_id(browser, 'queue', name)}/change/"
    kept = {
        "history": "0",
        "max_deliveries": "3",
        "redelivery_delay": "0.5",
        "redelivery_backoff": "2",
        "redelivery_delay_max": "4",
        "ttl": "",
        "_save": "Save",
    }
    answer = submit(browser, path, kept)
    assert answer.status_code == 302, errors(answer)
    assert relay.call("queue_get", name=name)["ttl"] is None
    for bad in ({"max_deliveries": "0"}, {"redelivery_delay": "5", "redelivery_delay_max": "1"},
                {"ttl": "-1"}, {"redelivery_backoff": "0.5"}):  # fmt: skip
        answer = submit(browser, path, {**kept, **bad})
        assert answer.status_code == 200 and errors(answer), bad
    queue = relay.call("queue_get", name=name)
    assert (queue["max_deliveries"], queue["redelivery_delay_max"], queue["ttl"]) == (3, 4.0, None)


def test_a_selector_with_several_conditions_keeps_them_when_changed_in_the_admin(browser, relay):
    name = unique()
    relay.call("queue_create", name=name)
    relay.call("selector_create", queue=name, when="match", action="delete", matches=[
        {"operator": "topic", "pattern": "orders.*"},
        {"operator": "eq", "pattern": "desk", "field": "return_address"},
    ])  # fmt: skip
    selector = row_id(browser, "selector", name)
    page = browser.get(f"/admin/wiring/selector/{selector}/change/")
    assert "return_address" in page.text
    answer = submit(browser, f"/admin/wiring/selector/{selector}/change/", {
        "when": "match", "match_operator": "topic", "match_pattern": "orders.*",
        "match_field": "address",
        "more_matches": '[["eq", "desk", "return_address"], ["prefix", "gold", "tier"]]',
        "action": "move", "target": "", "target_from": "header:to", "start": "current",
        "credit": "3", "_save": "Save",
    })  # fmt: skip
    assert answer.status_code == 302, errors(answer)
    [changed] = relay.call("selectors", queue=name)
    assert [m["field"] for m in changed["matches"]] == ["address", "return_address", "tier"]
    assert (changed["target_from"], changed["credit"]) == ("to", 3)
    answer = submit(browser, f"/admin/wiring/selector/{selector}/change/", {
        "when": "match", "match_operator": "topic", "match_pattern": "orders.*",
        "match_field": "address", "more_matches": '[["like", "x", "address"]]',
        "action": "delete", "start": "current", "credit": "3", "_save": "Save",
    })  # fmt: skip
    assert answer.status_code == 200 and "operator" in errors(answer)
    [kept] = relay.call("selectors", queue=name)
    assert len(kept["matches"]) == 3
