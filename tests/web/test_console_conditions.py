"""The console's selector builder with several conditions and a target from the envelope
(SPEC §12): create, read back as rows, preview with all conditions."""

from __future__ import annotations

import re

from tests.web.conftest import console_form, unique, wait_for

SUMMARY = re.compile(r"<strong>(\d+)</strong> of the last (\d+) message")


def builder(console, queue: str, **fields) -> dict:
    defaults = {
        "when": "match",
        "operator": "topic",
        "pattern": "orders.*",
        "field": "address",
        "more_operator": ["eq", "prefix"],
        "more_pattern": ["desk", "gold"],
        "more_field": ["return_address", "header:tier"],
        "action": "move",
        "target": "",
        "target_from": "header:to",
        "credit": "-1",
        "start": "current",
    }
    return console_form(console, f"/queues/{queue}/selectors/new/", **(defaults | fields))[1]


def new_queue(service) -> str:
    """A queue made through the API, with no selectors."""
    queue = unique()
    with service.client() as api:
        api.post("/api/queues", json={"name": queue})
    return queue


def test_a_selector_with_three_conditions_and_a_target_from_a_header(service, console) -> None:
    queue = unique()
    with service.client() as api:
        api.post("/api/queues", json={"name": queue, "history": 10})
        for reply, tier in (("desk", "gold"), ("desk", "tin"), ("shop", "gold"), ("desk", "gold")):
            api.post(
                f"/api/queues/{queue}/publish",
                json={"address": "orders.new", "return_address": reply, "headers": {"tier": tier}},
            )
        wait_for(lambda: api.get(f"/api/queues/{queue}/stats").json()["published"] == 4)
    form = builder(console, queue)
    preview = console.post(f"/queues/{queue}/selectors/preview/", data=form)
    assert SUMMARY.search(preview.text).group(1) == "2"
    made = console.post(f"/queues/{queue}/selectors/new/", data=form)
    assert made.status_code == 302, made.text[:2000]
    with service.client() as api:
        [selector] = api.get(f"/api/queues/{queue}/selectors").json()["selectors"]
    assert [m["field"] for m in selector["matches"]] == ["address", "return_address", "tier"]
    assert selector["target_from"] == "to" and selector["target"] is None
    page = console.get(f"/queues/{queue}/selectors/{selector['id']}/").text
    assert page.count('name="more_pattern"') == 3  # two rows and the template's
    assert 'value="gold"' in page and "data-add-condition" in page


def test_the_builder_refuses_a_bad_condition_and_both_targets(service, console) -> None:
    queue = new_queue(service)
    refused = console.post(
        f"/queues/{queue}/selectors/new/",
        data=builder(
            console, queue, more_operator=["regex"], more_pattern=["(a"], more_field=["address"]
        ),
    )
    assert refused.status_code == 200 and "condition 2" in refused.text
    refused = console.post(
        f"/queues/{queue}/selectors/new/", data=builder(console, queue, target="elsewhere")
    )
    assert refused.status_code == 200 and "not both" in refused.text
    with service.client() as api:
        assert api.get(f"/api/queues/{queue}/selectors").json()["selectors"] == []


def test_the_topology_draws_a_target_from_the_envelope_as_a_fan(service, console) -> None:
    queue = new_queue(service)
    with service.client() as api:
        made = api.post(
            f"/api/queues/{queue}/selectors",
            json={"when": "always", "action": "move", "target_from": "header:to"},
        )
        assert made.status_code == 201
    graph = console.get("/topology/graph/").json()
    [fan] = [node for node in graph["nodes"] if node["id"] == f"f:{queue}#1"]
    assert (fan["kind"], fan["name"]) == ("fan", "by to")
    [edge] = [edge for edge in graph["edges"] if edge["source"] == f"q:{queue}"]
    assert edge["target"] == fan["id"] and edge["action"] == "move"
