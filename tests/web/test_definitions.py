"""/api/definitions and `manage.py xump definitions`: the whole wiring as one document.

These tests run against a service of their own (its own database and store), so a wipe
wipes only what they made."""

from __future__ import annotations

import json
import time

import pytest

from engine.errors import InvalidSelector
from engine.relay import RelayClient
from tests.web.conftest import start_service


@pytest.fixture(scope="module")
def own(redis_server, tmp_path_factory):
    running = start_service(redis_server.url, tmp_path_factory.mktemp("definitions"), "inline")
    yield running
    running.close()


def build_wiring(client) -> None:
    """Queues with every option, selectors of every kind (with a gap in the ids), two
    patterns and two tokens."""
    for queue in (
        {"name": "orders.dead"},
        {"name": "audit", "journal": False, "history": 20},
        {"name": "orders", "limit": 100, "history": 5, "dead_letter": "orders.dead"},
        {"name": "scratch", "self_destruct": True},
    ):
        assert client.post("/api/queues", json=queue).status_code == 201
    selectors = [
        {"when": "always", "action": "delete"},  # deleted below: ids get a gap
        {"when": "filter", "filter": "priority > 5", "action": "move", "target": "audit",
         "credit": 3, "enabled": True},
        {"when": "match", "match": {"operator": "topic", "pattern": "stock.#"},
         "action": "copy", "target": "audit", "enabled": True},
        {"when": "match", "match": {"operator": "eq", "pattern": "eu", "field": "region"},
         "filter": "size > 2", "action": "deliver", "target": "alice", "start": "head"},
    ]  # fmt: skip
    for selector in selectors:
        made = client.post("/api/queues/orders/selectors", json=selector)
        assert made.status_code == 201, made.text
    assert client.delete("/api/queues/orders/selectors/1").status_code == 200
    made = client.post("/api/queues/scratch/selectors", json={"when": "default",
                                                              "action": "delete"})  # fmt: skip
    assert made.status_code == 201
    for pattern in (
        {"kind": "parrot", "name": "bob", "router": "news", "topic": "sport.*"},
        {"kind": "wolfpack", "name": "w1", "router": "jobs", "credit": 2},
    ):
        assert client.post("/api/patterns", json=pattern).status_code == 201
    for name, rights in (("reader", {"orders": ["read"]}), ("pub", {"*": ["publish"]})):
        made = client.post("/api/tokens", json={"name": name, "rights": rights})
        assert made.status_code == 201


def wipe(client) -> None:
    """Every pattern, queue and token except the one the tests use."""
    for pattern in client.get("/api/patterns").json()["patterns"]:
        assert client.delete(f"/api/patterns/{pattern['id']}").status_code == 200
    for queue in client.get("/api/queues").json()["queues"]:
        assert client.delete(f"/api/queues/{queue['name']}").status_code == 200
    for token in client.get("/api/tokens").json()["tokens"]:
        if token["name"] != "tests" and token["revoked"] is None:
            assert client.delete(f"/api/tokens/{token['id']}").status_code == 200


def test_export_wipe_import_export_gives_the_same_document(own) -> None:
    with own.client() as client:
        build_wiring(client)
        first = client.get("/api/definitions")
        assert first.status_code == 200
        document = first.json()
        assert document["xump_definitions"] == 1
        assert [q["name"] for q in document["queues"]] == [
            "audit", "jobs", "jobs:w1", "news", "news:bob", "orders", "orders.dead", "scratch"
        ]  # fmt: skip
        orders = [s for s in document["selectors"] if s["queue"] == "orders"]
        assert [(s["when"], s["action"], s["credit"], s["enabled"]) for s in orders] == [
            ("filter", "move", 3, True), ("match", "copy", -1, True),
            ("match", "deliver", -1, False),
        ]  # fmt: skip
        assert orders[2]["start"] == "head" and orders[2]["filter"] == "size > 2"
        assert {"kind": "wolfpack", "name": "w1", "router": "jobs", "topic": "",
                "credit": 2} in document["patterns"]  # fmt: skip
        assert {"name": "reader", "owner": None, "rights": {"orders": ["read"]}} in (
            document["tokens"]
        )
        assert "secret" not in json.dumps(document["tokens"])

        again = client.post("/api/definitions", json=document, params={"dry_run": True})
        assert again.status_code == 200, again.text
        assert again.json()["summary"]["create"] == again.json()["summary"]["update"] == 0

        wipe(client)
        emptied = client.get("/api/definitions").json()
        assert emptied["queues"] == emptied["selectors"] == emptied["patterns"] == []

        preview = client.post("/api/definitions", json=document, params={"dry_run": True})
        assert preview.status_code == 200 and preview.json()["dry_run"] is True
        assert (
            preview.json()["summary"]["create"] == 8 + 8 + 2 + 2
        )  # queues, selectors (the patterns' too), patterns, tokens
        assert client.get("/api/definitions").json() == emptied  # a dry run changes nothing

        imported = client.post("/api/definitions", json=document)
        assert imported.status_code == 200, imported.text
        secrets = {t["name"]: t["secret"] for t in imported.json()["secrets"]}
        assert set(secrets) == {"reader", "pub"}
        assert client.get("/api/definitions").json() == document

        repeated = client.post("/api/definitions", json=document).json()
        assert repeated["summary"]["create"] == repeated["summary"]["update"] == 0

        # the running router routes by the imported wiring
        message = {"address": "x", "headers": {"priority": 9}, "body": "b"}
        assert client.post("/api/queues/orders/publish", json=message).status_code == 202
        wait_for(lambda: client.get("/api/queues/audit/stats").json()["published"] == 1)
    with own.client(secrets["reader"]) as reader:
        assert reader.get("/api/queues/orders").status_code == 200
        assert reader.get("/api/queues/audit").status_code == 403


def wait_for(condition, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_an_update_is_shown_before_and_after_and_audited_once(own) -> None:
    with own.client() as client:
        client.post("/api/queues", json={"name": "tuned", "history": 1})
        document = client.get("/api/definitions").json()
        for queue in document["queues"]:
            if queue["name"] == "tuned":
                queue["history"] = 9
        preview = client.post("/api/definitions", json=document, params={"dry_run": "true"})
        assert preview.json()["changes"] == [{
            "kind": "queue", "subject": "tuned", "change": "update",
            "before": {"name": "tuned", "store": own.env["XUMP_STORE"], "limit": None,
                       "history": 1, "dead_letter": None, "self_destruct": False,
                       "journal": True},
            "after": {"name": "tuned", "store": own.env["XUMP_STORE"], "limit": None,
                      "history": 9, "dead_letter": None, "self_destruct": False,
                      "journal": True},
        }]  # fmt: skip
        assert client.get("/api/queues/tuned").json()["history"] == 1
        assert client.post("/api/definitions", json=document).status_code == 200
        assert client.get("/api/queues/tuned").json()["history"] == 9
    audited = own.manage(
        "shell", "-c",
        "from xumpweb.wiring.models import AuditEvent\n"
        "e = AuditEvent.objects.filter(action='definitions.import').first()\n"
        "print(e.who, '|', e.subject, '|', e.after)",
    )  # fmt: skip
    assert "token:tests | 0 created, 1 updated" in audited.stdout, audited.stderr


def test_a_selector_is_known_by_its_content_and_only_its_settings_change(own) -> None:
    with own.client() as client:
        client.post("/api/queues", json={"name": "known"})
        made = client.post("/api/queues/known/selectors", json={
            "when": "match", "match": {"operator": "prefix", "pattern": "eu."},
            "action": "delete", "credit": 3, "enabled": True,
        }).json()  # fmt: skip
        client.post("/api/patterns", json={"kind": "wolfpack", "name": "w9", "router": "known"})
        document = {
            "xump_definitions": 1,
            # written by hand: no field, defaults left out
            "selectors": [{"queue": "known", "when": "match", "action": "delete",
                           "match": {"operator": "prefix", "pattern": "eu."}, "credit": 5}],
        }  # fmt: skip
        preview = client.post("/api/definitions", json=document, params={"dry_run": True}).json()
        assert [(c["change"], c["subject"]) for c in preview["changes"]] == [
            ("update", f"known: WHEN address prefix 'eu.' DO delete (#{made['id']})")
        ]
        assert client.post("/api/definitions", json=document).status_code == 200
        [after] = [s for s in client.get("/api/queues/known/selectors").json()["selectors"]
                   if s["action"] == "delete"]  # fmt: skip
        assert (after["id"], after["credit"], after["enabled"]) == (made["id"], 5, False)

        store = own.env["XUMP_STORE"]
        elsewhere = {
            "xump_definitions": 1,
            "stores": [{"name": store, "kind": "redis", "url": "redis://prod:6379/0"}],
        }
        kept = client.post("/api/definitions", json=elsewhere, params={"dry_run": True})
        assert kept.json()["changes"] == []  # each installation keeps its store's URL
        elsewhere["stores"][0]["kind"] = "sql"
        assert client.post("/api/definitions", json=elsewhere).json()["problems"] == [
            f"stores[0] ({store}): exists as a redis store; a store cannot be changed"
        ]
        wolfpack = {"kind": "wolfpack", "name": "w9", "router": "known", "credit": 4}
        refused = client.post("/api/definitions", json={
            "xump_definitions": 1, "patterns": [wolfpack, wolfpack],
        }).json()["problems"]  # fmt: skip
        assert refused == [
            "patterns[0] (wolfpack known -> w9): exists with topic '' and credit 1; remove it "
            "first to change it",
            "patterns[1] (wolfpack known -> w9): named twice",
        ]


def test_an_invalid_import_changes_nothing_and_names_every_problem(own) -> None:
    with own.client() as client:
        before = client.get("/api/definitions").json()
        document = {
            "xump_definitions": 1,
            "queues": [
                {"name": "fresh-valid"},
                {"name": "has space"},
                {"name": "neg", "limit": -5},
                {"name": "dl", "dead_letter": "missing-dlq"},
                {"name": "typo", "histroy": 3},
            ],
            "selectors": [
                {"queue": "fresh-valid", "when": "filter", "filter": "priority >",
                 "action": "delete"},
                {"queue": "fresh-valid", "when": "always", "action": "move",
                 "target": "nowhere"},
                {"queue": "no-such-queue", "when": "always", "action": "delete"},
                {"queue": "fresh-valid", "when": "always", "action": "delete", "credit": -7},
            ],
            "patterns": [{"kind": "ferret", "name": "x", "router": "r"}],
            "tokens": [
                {"name": "t1", "owner": "ghost", "rights": {"*": ["read"]}},
                {"name": "t2", "rights": {"*": ["fly"]}},
            ],
        }  # fmt: skip
        answer = client.post("/api/definitions", json=document)
        assert answer.status_code == 400
        body = answer.json()
        assert body["error"] == "invalid_definitions"
        problems = body["problems"]
        # the shape is checked first: an unknown key stops the rest
        assert problems == ["queues[4]: unknown key(s) histroy"]
        document["queues"][4] = {"name": "typo", "history": 3}
        problems = client.post("/api/definitions", json=document).json()["problems"]
        expected = [
            "queues[1] (has space)", "queues[2] (neg)", "missing-dlq",
            "selectors[0] (on fresh-valid)", "selectors[1] (on fresh-valid)", "nowhere",
            "selectors[2] (on no-such-queue)", "selectors[3] (on fresh-valid)",
            "patterns[0]", "ghost", "tokens[1] (t2)",
        ]  # fmt: skip
        for text in expected:
            assert any(text in problem for problem in problems), (text, problems)
        assert len(problems) == 10, problems
        assert client.get("/api/definitions").json() == before
        assert client.post("/api/definitions", json=[1]).status_code == 400
        for version in (2, True, 1.0, "1"):  # True and 1.0 equal 1 in Python: not versions
            answer = client.post("/api/definitions", json={"xump_definitions": version})
            assert answer.json()["problems"] == [
                "xump_definitions must be 1 (the format's version)"
            ], version


def test_definitions_are_for_admins_only(own) -> None:
    with own.client() as client:
        issued = client.post("/api/tokens", json={"name": "m", "rights": {"orders": ["manage"]}})
        secret = issued.json()["secret"]
    with own.client(secret) as manager:
        assert manager.get("/api/definitions").status_code == 403
        answer = manager.post("/api/definitions", json={"xump_definitions": 1})
        assert answer.status_code == 403 and answer.json()["error"] == "forbidden"


def test_a_failing_apply_in_the_router_undoes_what_it_did(own) -> None:
    relay = RelayClient(own.env["XUMP_REDIS_URL"], own.env["XUMP_STORE"])
    try:
        with pytest.raises(InvalidSelector):
            relay.call(
                "definitions_apply", stores=[],
                queues_create=[{"name": "undone", "store": own.env["XUMP_STORE"], "limit": 3,
                                "history": 0, "dead_letter": None, "self_destruct": False,
                                "journal": True}],
                queues_update=[], selectors_update=[], patterns=[],
                selectors_create=[
                    {"queue": "undone", "when": "always", "action": "delete"},
                    {"queue": "undone", "when": "filter", "filter": "a >", "action": "delete"},
                ],
            )  # fmt: skip
        names = [q["name"] for q in relay.call("queues")]
        assert "undone" not in names
    finally:
        relay.close()


def test_the_cli_exports_and_imports_with_a_dry_run(own, tmp_path) -> None:
    out = tmp_path / "definitions.json"
    exported = own.manage("xump", "definitions", "export", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    document = json.loads(out.read_text())
    with own.client() as client:
        assert client.get("/api/definitions").json() == document
    document["queues"].append({"name": "from-cli", "history": 2})
    out.write_text(json.dumps(document))
    dry = own.manage("xump", "definitions", "import", str(out), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "create  queue     from-cli" in dry.stdout
    assert "dry run: 1 to create, 0 to update" in dry.stdout
    with own.client() as client:
        assert client.get("/api/queues/from-cli").status_code == 404
    done = own.manage("xump", "definitions", "import", str(out))
    assert done.returncode == 0 and "imported: 1 created" in done.stdout, done.stderr
    with own.client() as client:
        assert client.get("/api/queues/from-cli").json()["history"] == 2
    document["queues"].append({"name": "bad name"})
    document["selectors"].append({"queue": "from-cli", "when": "filter", "filter": "x ="})
    out.write_text(json.dumps(document))
    refused = own.manage("xump", "definitions", "import", str(out))
    assert refused.returncode == 1
    assert refused.stderr.count("xump: problem:") == 2, refused.stderr
    assert "2 problem(s); nothing changed" in refused.stderr


def test_a_big_import_is_applied_in_steps_and_its_answer_says_where_to_follow_it(own) -> None:
    """Issue 21: 10,000 queues held the router in one step for more than the call timeout:
    the API answered 503 yet the import then applied in full, and every other call waited.
    An import of more than one step's worth is accepted (202) with where to follow it, and
    applied in steps with routing between them; other calls answer meanwhile."""
    store = own.env["XUMP_STORE"]
    queues = [{"name": f"bulk-{n:04}", "store": store, "history": 0} for n in range(700)]
    queues[0]["dead_letter"] = queues[-1]["name"]  # made in a later step than the first
    selectors = [{"queue": q["name"], "when": "always", "action": "delete", "enabled": True}
                 for q in queues[:300]]  # fmt: skip
    document = {"xump_definitions": 1, "queues": queues, "selectors": selectors,
                "tokens": [{"name": "bulk-reader", "owner": None,
                            "rights": {"bulk-*": ["read"]}}]}  # fmt: skip
    with own.client() as client:
        answer = client.post("/api/definitions", json=document, timeout=60)
        assert answer.status_code == 202, answer.text
        accepted = answer.json()
        follow = accepted["follow"]
        assert answer.headers["Location"] == follow
        assert accepted["state"] in ("running", "done") and accepted["steps"] > 1
        assert accepted["summary"]["create"] == 700 + 300 + 1
        [secret] = accepted["secrets"]  # tokens are made at once: their secrets shown here
        assert secret["name"] == "bulk-reader"
        answered = []
        deadline = time.monotonic() + 120
        while (status := client.get(follow).json())["state"] == "running":
            started = time.monotonic()
            other = client.get("/api/queues", params={"limit": 1})
            assert other.status_code == 200, (other.text, status, time.monotonic() - started)
            answered.append(time.monotonic() - started)
            assert time.monotonic() < deadline, status
            time.sleep(0.05)
        assert status["state"] == "done", status
        assert status["done"] == status["steps"] == accepted["steps"]
        listed = client.get("/api/queues", params={"prefix": "bulk-"}).json()
        assert listed["total"] == 700
        first = client.get("/api/queues/bulk-0000").json()
        assert first["dead_letter"] == "bulk-0699" and len(first["selectors"]) == 1
        again = client.post("/api/definitions", json=document, timeout=60)
        assert again.status_code == 200  # nothing to change: no steps
        assert again.json()["summary"]["unchanged"] == 700 + 300 + 1
        assert client.get("/api/definitions/imports/no-such-import").status_code == 404
