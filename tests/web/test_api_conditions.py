"""SPEC §12 over HTTP: selectors with several conditions (`matches`) and targets from the
envelope (`target_from`), in the selector endpoints and in definitions export/import."""

from __future__ import annotations

from tests.web.conftest import unique, wait_for


def make_queue(client, **settings) -> str:
    name = unique()
    assert client.post("/api/queues", json={"name": name, **settings}).status_code == 201
    return name


def three_conditions(client, target: str) -> dict:
    return {
        "when": "match",
        "matches": [
            {"operator": "topic", "pattern": "orders.*"},
            {"operator": "eq", "pattern": "desk", "field": "return_address"},
            {"operator": "prefix", "pattern": "gold", "field": "header:tier"},
        ],
        "action": "copy",
        "target": target,
        "enabled": True,
    }


def single_match_selector(client, queue: str):
    """Selector 1 of `queue`, made with the one-condition `match` form (DELETE when eq a)."""
    return client.post(
        f"/api/queues/{queue}/selectors",
        json={"when": "match", "match": {"operator": "eq", "pattern": "a"}, "action": "delete"},
    )


def test_a_selector_with_three_conditions_is_created_read_and_routes(service) -> None:
    with service.client() as client:
        queue, target = make_queue(client), make_queue(client, history=10)
        created = client.post(
            f"/api/queues/{queue}/selectors", json=three_conditions(client, target)
        )
        assert created.status_code == 201, created.text
        selector = created.json()
        assert [m["field"] for m in selector["matches"]] == ["address", "return_address", "tier"]
        assert selector["match"] == {"operator": "topic", "pattern": "orders.*", "field": "address"}
        for reply, tier in (("desk", "gold"), ("shop", "gold"), ("desk", "tin")):
            sent = client.post(
                f"/api/queues/{queue}/publish",
                json={"address": "orders.new", "return_address": reply, "headers": {"tier": tier}},
            )
            assert sent.status_code == 202
        wait_for(lambda: client.get(f"/api/queues/{queue}/stats").json()["routed"] == 3)
        kept = client.get(f"/api/queues/{target}/waiting").json()["messages"]
        assert [(m["return_address"], m["headers"]["tier"]) for m in kept] == [("desk", "gold")]


def test_the_single_match_is_still_accepted_and_patch_changes_the_list(service) -> None:
    with service.client() as client:
        queue = make_queue(client)
        made = single_match_selector(client, queue)
        assert made.status_code == 201 and len(made.json()["matches"]) == 1
        changed = client.patch(
            f"/api/queues/{queue}/selectors/1",
            json={
                "matches": [
                    {"operator": "eq", "pattern": "a"},
                    {"operator": "eq", "pattern": "eu", "field": "region"},
                ]
            },
        )
        assert changed.status_code == 200, changed.text
        assert len(changed.json()["matches"]) == 2
        kept = client.patch(f"/api/queues/{queue}/selectors/1", json={"filter": "qty > 1"})
        assert len(kept.json()["matches"]) == 2 and kept.json()["filter"] == "qty > 1"


def test_bad_conditions_are_400_and_change_nothing(service) -> None:
    with service.client() as client:
        queue = make_queue(client)
        made = single_match_selector(client, queue)
        before = made.json()
        for matches in (
            [{"operator": "eq", "pattern": "a", "field": "1bad"}],
            [{"operator": "regex", "pattern": "(a"}],
            [{"operator": "regex", "pattern": r"(a)\1"}],
            [{"operator": "eq", "pattern": "x" * 100_000}],
            [{"operator": "eq", "pattern": "a"}] * 17,
            [],
        ):
            answer = client.patch(f"/api/queues/{queue}/selectors/1", json={"matches": matches})
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"] in (
                "invalid_selector",
                "invalid_argument",
                "invalid_request",
            )
        both = client.patch(
            f"/api/queues/{queue}/selectors/1",
            json={
                "match": {"operator": "eq", "pattern": "a"},
                "matches": [{"operator": "eq", "pattern": "a"}],
            },
        )
        assert both.status_code == 400
        after = client.get(f"/api/queues/{queue}/selectors/1").json()
        assert (after["matches"], after["enabled"]) == (before["matches"], before["enabled"])


def test_a_target_from_a_header_and_its_failure(service) -> None:
    with service.client() as client:
        dlq = make_queue(client, history=10)
        queue = make_queue(client, dead_letter=dlq)
        target = make_queue(client, history=10)
        made = client.post(
            f"/api/queues/{queue}/selectors",
            json={"when": "always", "action": "move", "target_from": "header:to", "enabled": True},
        )
        assert made.status_code == 201, made.text
        assert made.json()["target_from"] == "to" and made.json()["target"] is None
        assert (
            client.post(
                f"/api/queues/{target}/selectors",
                json={"when": "always", "action": "delete", "enabled": True},
            ).status_code
            == 201
        )
        client.post(f"/api/queues/{queue}/publish", json={"headers": {"to": target}})
        client.post(f"/api/queues/{queue}/publish", json={"headers": {"to": "nowhere"}})
        client.post(f"/api/queues/{queue}/publish", json={})
        wait_for(lambda: len(client.get(f"/api/queues/{target}/history").json()["messages"]) == 1)
        wait_for(lambda: client.get(f"/api/queues/{dlq}/stats").json()["published"] == 2)
        letters = client.get(f"/api/queues/{dlq}/waiting").json()["messages"]
        assert sorted(m["headers"]["x-reason"] for m in letters) == ["no-such-queue", "no-target"]
        both = client.post(
            f"/api/queues/{queue}/selectors",
            json={"when": "always", "action": "move", "target": target, "target_from": "to"},
        )
        assert both.status_code == 400 and "not both" in both.json()["detail"]


def test_definitions_export_and_import_carry_the_conditions_and_target_from(service) -> None:
    with service.client() as client:
        queue, target = make_queue(client), make_queue(client)
        client.post(f"/api/queues/{queue}/selectors", json=three_conditions(client, target))
        client.post(
            f"/api/queues/{queue}/selectors",
            json={"when": "always", "action": "deliver", "target_from": "return_address"},
        )
        exported = [
            s for s in client.get("/api/definitions").json()["selectors"] if s["queue"] == queue
        ]
        assert [len(s["matches"] or []) for s in exported] == [3, 0]
        assert exported[1]["target_from"] == "return_address"
        again = client.post(
            "/api/definitions",
            json={"xump_definitions": 1, "selectors": exported},
            params={"dry_run": True},
        )
        assert again.status_code == 200, again.text
        assert again.json()["changes"] == []  # known by their content: nothing to do
        other = make_queue(client)
        written = {
            "xump_definitions": 1,
            "selectors": [
                {
                    "queue": other,
                    "when": "match",
                    "action": "delete",
                    "matches": [
                        {"operator": "eq", "pattern": "a"},
                        {"operator": "eq", "pattern": "eu", "field": "region"},
                    ],
                },
                {
                    "queue": other,
                    "when": "match",
                    "action": "delete",
                    "match": {"operator": "eq", "pattern": "b"},
                },
                {"queue": other, "when": "always", "action": "move", "target_from": "header:to"},
            ],
        }
        assert client.post("/api/definitions", json=written).status_code == 200
        made = client.get(f"/api/queues/{other}/selectors").json()["selectors"]
        assert [len(s["matches"]) for s in made] == [2, 1, 0]
        assert made[2]["target_from"] == "to"


def test_definitions_with_bad_conditions_change_nothing(service) -> None:
    with service.client() as client:
        queue = make_queue(client)
        for selector in (
            {"matches": [{"operator": "eq", "pattern": "a", "field": "no field"}]},
            {"matches": [{"operator": "eq", "pattern": "a"}] * 17},
            {"matches": [{"operator": "eq", "pattern": "a", "bogus": 1}]},
            {"matches": ["x"]},
            {
                "match": {"operator": "eq", "pattern": "a"},
                "matches": [{"operator": "eq", "pattern": "b"}],
            },
        ):
            document = {
                "xump_definitions": 1,
                "selectors": [{"queue": queue, "when": "match", "action": "delete", **selector}],
            }
            answer = client.post("/api/definitions", json=document)
            assert answer.status_code == 400, answer.text
            assert answer.json()["problems"]
        assert client.get(f"/api/queues/{queue}/selectors").json()["selectors"] == []


def test_hostile_bodies_for_a_selector_are_400(service) -> None:
    with service.client() as client:
        queue = make_queue(client)
        deep = b'{"when": "match", "matches": ' + b"[" * 5000 + b"]" * 5000 + b"}"
        answer = client.post(f"/api/queues/{queue}/selectors", content=deep)
        assert answer.status_code == 400 and answer.json()["error"] == "malformed_json"
        for matches in (
            [{"operator": "regex", "pattern": "(a+)+$" * 200}],  # 1,200 characters
            [{"operator": "eq", "pattern": "a", "field": "header:" + "h" * 300}],
            [{"operator": "eq", "pattern": "a", "field": "header:\u0000"}],
            [{"operator": "eq", "pattern": "a", "field": ["address"]}],
        ):
            answer = client.post(
                f"/api/queues/{queue}/selectors",
                json={"when": "match", "matches": matches, "action": "delete"},
            )
            assert answer.status_code == 400, answer.text
        answer = client.post(
            f"/api/queues/{queue}/selectors",
            json={"when": "always", "action": "move", "target_from": "header:\ud7ff" * 100},
        )
        assert answer.status_code == 400
        assert client.get(f"/api/queues/{queue}/selectors").json()["selectors"] == []
