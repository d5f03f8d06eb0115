"""Importing the same hand-written definitions twice changes nothing the second time; parts
of a selector that would not apply are refused (by the import and by the selectors API)
rather than dropped unseen; a PATCH that takes away half of a WHEN takes it away."""

from __future__ import annotations

from tests.web.conftest import unique, wait_for


def document(*selectors: dict, queues: tuple[str, ...] = ()) -> dict:
    return {
        "xump_definitions": 1,
        "queues": [{"name": name} for name in queues],
        "selectors": list(selectors),
    }


def selectors_of(client, queue: str) -> list[dict]:
    return client.get(f"/api/queues/{queue}/selectors").json()["selectors"]


def test_a_hand_written_document_imported_twice_changes_nothing_the_second_time(service) -> None:
    with service.client() as client:
        a, b = unique(), unique()
        written = document(
            {"queue": a, "when": "match", "action": "copy", "target": b,
             "matches": [{"operator": "eq", "pattern": "z", "field": "header:color"}]},
            {"queue": a, "when": "always", "action": "copy", "target_from": "header:dest"},
            # a field named like the envelope's keeps its prefix; a missing one is the address
            {"queue": a, "when": "match", "action": "delete",
             "match": {"operator": "eq", "pattern": "y", "field": "header:address"}},
            {"queue": a, "when": "filter", "action": "delete", "filter": "n > 1",
             "match": {"operator": "prefix", "pattern": "p."}},
            {"queue": a, "when": "match", "action": "move", "target_from": "header:to",
             "matches": [{"operator": "eq", "pattern": "q"},
                         {"operator": "topic", "pattern": "t.*", "field": "header:kind"}]},
            queues=(a, b),
        )  # fmt: skip
        first = client.post("/api/definitions", json=written)
        assert first.status_code == 200, first.text
        assert first.json()["summary"]["create"] == 7  # two queues, five selectors
        made = selectors_of(client, a)
        assert [s["matches"][0]["field"] if s["matches"] else None for s in made] == [
            "color",
            None,
            "header:address",
            "address",
            "address",
        ]
        assert made[1]["target_from"] == "dest" and made[4]["target_from"] == "to"
        for again in range(2):
            answer = client.post("/api/definitions", json=written)
            assert answer.status_code == 200, answer.text
            assert answer.json()["changes"] == [], (again, answer.json())
            assert answer.json()["summary"] == {"create": 0, "update": 0, "unchanged": 7}
        assert selectors_of(client, a) == made


def test_a_reimport_that_changes_a_setting_updates_the_selector_it_names(service) -> None:
    with service.client() as client:
        a, b = unique(), unique()
        selector = {"queue": a, "when": "always", "action": "copy", "target_from": "header:dest"}
        client.post("/api/definitions", json=document(selector, queues=(a, b)))
        changed = client.post(
            "/api/definitions", json=document({**selector, "credit": 4}, queues=(a, b))
        ).json()
        assert changed["summary"] == {"create": 0, "update": 1, "unchanged": 2}
        [kept] = selectors_of(client, a)
        assert (kept["id"], kept["credit"], kept["target_from"]) == (1, 4, "dest")


def test_an_empty_field_is_a_problem_and_changes_nothing(service) -> None:
    with service.client() as client:
        a = unique()
        before = client.get("/api/definitions").json()
        empty = {"operator": "eq", "pattern": "y", "field": ""}
        for condition in ({"match": empty},
                          {"matches": [{"operator": "eq", "pattern": "z"}, empty]}):  # fmt: skip
            written = document(
                {"queue": a, "when": "match", "action": "delete", **condition}, queues=(a,)
            )
            answer = client.post("/api/definitions", json=written)
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"] == "invalid_definitions"
            [problem] = answer.json()["problems"]
            assert problem.startswith("selectors[0]: match") and "field must not be empty" in (
                problem
            )
        assert client.get("/api/definitions").json() == before


PARTS_THAT_DO_NOT_APPLY = [
    ({"when": "always", "matches": [{"operator": "eq", "pattern": "z"}], "action": "delete"},
     "when 'always' has no conditions: leave out the match conditions"),
    ({"when": "always", "match": {"operator": "eq", "pattern": "z"}, "action": "delete"},
     "when 'always' has no conditions: leave out the match conditions"),
    ({"when": "default", "filter": "n > 1", "action": "delete"},
     "when 'default' has no conditions: leave out the filter"),
    ({"when": "always", "action": "delete", "target": "TARGET"},
     "a delete selector has no target: leave out `target`"),
    ({"when": "always", "action": "delete", "target_from": "header:dest"},
     "a delete selector has no target: leave out `target_from`"),
]  # fmt: skip


def test_parts_of_a_selector_that_would_not_apply_are_problems_of_an_import(service) -> None:
    with service.client() as client:
        a, b = unique(), unique()
        assert client.post("/api/queues", json={"name": b}).status_code == 201
        before = client.get("/api/definitions").json()
        written = document(
            *({"queue": a, **settings, **({"target": b} if "target" in settings else {})}
              for settings, _ in PARTS_THAT_DO_NOT_APPLY),
            {"queue": a, "action": "copy", "target": b, "filter": "n > 1"},  # no WHEN
            {"queue": a, "when": "always", "target": b},  # no DO
            queues=(a,),
        )  # fmt: skip
        answer = client.post("/api/definitions", json=written)
        assert answer.status_code == 400, answer.text
        assert answer.json()["problems"] == [
            *(f"selectors[{n}] (on {a}): {why}" for n, (_, why) in
              enumerate(PARTS_THAT_DO_NOT_APPLY)),
            f"selectors[5] (on {a}): a WHEN is needed for the filter: give `when` (match or "
            "filter)",
            f"selectors[6] (on {a}): an action is needed for `target`: give `action`",
        ]  # fmt: skip
        assert client.get("/api/definitions").json() == before


def test_parts_of_a_selector_that_would_not_apply_are_400_in_the_selectors_api(service) -> None:
    with service.client() as client:
        queue, target = unique(), unique()
        for name in (queue, target):
            assert client.post("/api/queues", json={"name": name}).status_code == 201
        for settings, why in PARTS_THAT_DO_NOT_APPLY:
            if "target" in settings:
                settings = {**settings, "target": target}
            answer = client.post(f"/api/queues/{queue}/selectors", json=settings)
            assert answer.status_code == 400, (settings, answer.text)
            assert answer.json() == {"error": "invalid_argument", "detail": why}
        assert selectors_of(client, queue) == []
        made = client.post(
            f"/api/queues/{queue}/selectors", json={"when": "always", "action": "delete"}
        )
        assert made.status_code == 201
        for change in (
            {"target": target},  # the action it has is a delete
            {"target_from": "to"},
            {"when": "always", "filter": "n > 1"},
            {"when": "overflow", "match": {"operator": "eq", "pattern": "z"}},
        ):
            answer = client.patch(f"/api/queues/{queue}/selectors/{made.json()['id']}", json=change)
            assert answer.status_code == 400, (change, answer.text)
        assert selectors_of(client, queue) == [made.json()]


def test_a_patch_takes_away_one_half_of_a_when_made_of_conditions_and_a_filter(
    service,
) -> None:
    """`matches` empty, `match` null or `when` "filter" leave the filter alone; `filter`
    null leaves the conditions alone. Each answered 200 and changed nothing (the setters
    keep the other half), and the routing follows the change."""
    with service.client() as client:
        queue, target = unique(), unique()
        assert client.post("/api/queues", json={"name": queue}).status_code == 201
        assert client.post("/api/queues", json={"name": target, "history": 10}).status_code == 201
        both = {"when": "match", "match": {"operator": "eq", "pattern": "a"}, "filter": "n > 1"}
        made = client.post(f"/api/queues/{queue}/selectors", json={
            **both, "action": "copy", "target": target, "enabled": True,
        })  # fmt: skip
        assert made.status_code == 201, made.text
        one = f"/api/queues/{queue}/selectors/{made.json()['id']}"
        for change, describe in (
            ({"matches": []}, "filter n > 1"),
            ({"match": None}, "filter n > 1"),
            ({"when": "filter", "filter": "n > 1"}, "filter n > 1"),
            ({"filter": None}, "address is a"),
        ):
            assert client.patch(one, json=both).status_code == 200
            answer = client.patch(one, json=change)
            assert answer.status_code == 200, (change, answer.text)
            assert answer.json()["describe"] == f"{describe} → copy to {target}", change
            assert client.get(one).json()["describe"] == answer.json()["describe"]
        assert client.patch(one, json=both).status_code == 200
        assert client.patch(one, json={"matches": []}).status_code == 200  # the filter alone
        for address, n in (("b", 5), ("a", 0)):  # "a" with n 0 is not
            sent = client.post(
                f"/api/queues/{queue}/publish", json={"address": address, "headers": {"n": n}}
            )
            assert sent.status_code == 202
        wait_for(lambda: client.get(f"/api/queues/{queue}/stats").json()["routed"] == 2)
        copied = client.get(f"/api/queues/{target}/waiting").json()["messages"]
        assert [m["address"] for m in copied] == ["b"]


def test_a_boolean_setting_takes_a_boolean_only(service) -> None:
    """pydantic's lax mode took "yes", "on", 1 and "1" for true: a typo went through."""
    with service.client() as client:
        queue = unique()
        assert client.post("/api/queues", json={"name": queue}).status_code == 201
        for wrong in ("yes", 1, "true", "1"):
            answer = client.post(f"/api/queues/{queue}/selectors", json={
                "when": "always", "action": "delete", "enabled": wrong})  # fmt: skip
            assert answer.status_code == 400, (wrong, answer.text)
            made = client.post("/api/queues", json={"name": unique(), "journal": wrong})
            assert made.status_code == 400, (wrong, made.text)
        assert selectors_of(client, queue) == []
