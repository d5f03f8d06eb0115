"""SPEC §12 over HTTP: POST /api/queues/{queue}/explain and GET /api/messages/{mid}/trace."""

from __future__ import annotations

import time

from tests.web.conftest import unique, wait_for
from tests.web.test_api_conditions import three_conditions


def make_queue(client, **settings) -> str:
    name = unique()
    assert client.post("/api/queues", json={"name": name, **settings}).status_code == 201
    return name


def issue(service, rights: dict) -> str:
    with service.client() as client:
        made = client.post("/api/tokens", json={"name": unique("t"), "rights": rights})
        assert made.status_code == 201, made.text
        return made.json()["secret"]


def test_explain_gives_verdicts_and_changes_nothing(service) -> None:
    with service.client() as client:
        queue, target = make_queue(client), make_queue(client)
        client.post(f"/api/queues/{queue}/selectors", json=three_conditions(client, target))
        before = client.get(f"/api/queues/{queue}/stats").json()
        said = client.post(
            f"/api/queues/{queue}/explain",
            json={"address": "orders.new", "return_address": "shop", "headers": {"tier": "gold"}},
        )
        assert said.status_code == 200, said.text
        verdict = said.json()["steps"][0]["selectors"][0]
        assert verdict["condition"] == 2 and "return_address" in verdict["reason"]
        said = client.post(
            f"/api/queues/{queue}/explain",
            json={"address": "orders.new", "return_address": "desk", "headers": {"tier": "gold"}},
        )
        assert [s["queue"] for s in said.json()["steps"]] == [queue, target]
        assert client.get(f"/api/queues/{queue}/stats").json() == before


def test_explain_says_a_delayed_message_is_held_first(service) -> None:
    """`delay` and `not_before` were dropped on the way to the engine: the answer was that
    of a message routed at once."""
    with service.client() as client:
        queue = make_queue(client)
        for timing in ({"delay": 30}, {"not_before": time.time() + 30}):
            said = client.post(f"/api/queues/{queue}/explain", json={"address": "a", **timing})
            assert said.status_code == 200, said.text
            assert 29 <= said.json()["scheduled"]["delay"] <= 30, timing
        assert "scheduled" not in client.post(f"/api/queues/{queue}/explain", json={}).json()


def test_explain_refuses_bad_bodies_unknown_queues_and_callers_without_read(service) -> None:
    with service.client() as client:
        queue = make_queue(client)
        deep = b'{"headers": ' + b"[" * 5000 + b"]" * 5000 + b"}"
        answer = client.post(f"/api/queues/{queue}/explain", content=deep)
        assert answer.status_code == 400
        surrogate = rb'{"headers": {"h": "\ud800"}}'
        answer = client.post(f"/api/queues/{queue}/explain", content=surrogate)
        assert answer.status_code == 400
        assert client.post(f"/api/queues/{queue}/explain", json={"bogus": 1}).status_code == 400
        assert client.post(f"/api/queues/{unique()}/explain", json={}).status_code == 404
    other = issue(service, {"elsewhere": ["read"]})
    with service.client(other) as stranger:
        assert stranger.post(f"/api/queues/{queue}/explain", json={}).status_code == 403


def test_trace_of_a_copied_delivered_and_confirmed_message(service) -> None:
    with service.client() as client:
        queue, copy = make_queue(client), make_queue(client)
        client.post(
            f"/api/queues/{queue}/selectors",
            json={"when": "always", "action": "copy", "target": copy, "enabled": True},
        )
        client.post(
            f"/api/queues/{queue}/selectors",
            json={"when": "always", "action": "delete", "enabled": True},
        )
        mid = client.post(f"/api/queues/{queue}/publish", json={"body": "x"}).json()["mid"]

        def traced():
            answer = client.get(f"/api/messages/{mid}/trace")
            return answer.status_code == 200 and len(answer.json()["steps"]) >= 3 and answer

        answer = wait_for(traced)
        steps = answer.json()["steps"]
        assert [(s["kind"], s["queue"]) for s in steps] == [
            ("publish", queue),
            ("route", queue),
            ("delete", queue),
        ]
        assert steps[0]["seq"] == 1 and steps[1]["target"] == copy
        assert all(s["source"] == "journal" for s in steps)
    reader = issue(service, {copy: ["read"]})  # may not read `queue`: sees nothing of it
    with service.client(reader) as stranger:
        assert stranger.get(f"/api/messages/{mid}/trace").status_code == 404


def test_trace_of_an_unknown_or_bad_mid(service) -> None:
    with service.client() as client:
        assert client.get("/api/messages/nope-12345/trace").status_code == 404
        assert client.get(f"/api/messages/{'m' * 300}/trace").status_code == 400


def test_trace_reads_journal_chunks_of_either_form(service) -> None:
    """The router writes a step's events to the journal list as flat fields ("fields",
    "width"); a chunk written before holds one list per event ("events"), of 8 fields when
    older than delivery tags. A trace reads both forms."""
    import orjson
    import redis

    from xumpweb.analytics.journal import journal_key

    with service.client() as client:
        queue = make_queue(client)
        mid = client.post(f"/api/queues/{queue}/publish", json={"body": "x"}).json()["mid"]

        def traced(count: int):
            answer = client.get(f"/api/messages/{mid}/trace")
            return answer.status_code == 200 and len(answer.json()["steps"]) >= count and answer

        wait_for(lambda: traced(1))
        store = redis.Redis.from_url(service.env["XUMP_REDIS_URL"])
        key = journal_key(service.env["XUMP_STORE"])
        written = [orjson.loads(item) for item in store.lrange(key, 0, -1)]
        ours = [chunk for chunk in written if orjson.dumps(mid) in orjson.dumps(chunk)]
        assert ours and all(set(chunk) == {"epoch", "first", "width", "fields"} for chunk in ours)
        assert all(len(chunk["fields"]) % chunk["width"] == 0 for chunk in ours)
        older = {"epoch": "older", "first": 1,
                 "events": [[1.0, "route", mid, queue, 1, queue, "copy", "a"]]}  # fmt: skip
        store.rpush(key, orjson.dumps(older))
        store.close()
        steps = wait_for(lambda: traced(2)).json()["steps"]
    assert [(s["kind"], s["epoch"] == "older") for s in steps] == [
        ("route", True),
        ("publish", False),
    ]
    assert steps[0]["tag"] is None and steps[0]["target"] == queue


def test_a_trace_finds_a_message_behind_many_later_routing_steps(service) -> None:
    """A router writes one journal chunk a routing step, so a message's steps soon lie
    behind thousands of small chunks (a lone message at a time is a step each): a trace
    reads the list back by size, not by a count of chunks, and still finds them before
    the archive export takes them (every XUMP_ARCHIVE_INTERVAL, 5 minutes by default)."""
    import orjson
    import redis

    from xumpweb.analytics.journal import journal_key

    with service.client() as client:
        queue = make_queue(client)
        mid = client.post(f"/api/queues/{queue}/publish", json={"body": "x"}).json()["mid"]
        assert wait_for(lambda: client.get(f"/api/messages/{mid}/trace").status_code == 200)
        store = redis.Redis.from_url(service.env["XUMP_REDIS_URL"])
        elsewhere = unique()  # 2,000 later steps, one event each, of other messages

        def chunk(n: int) -> bytes:  # a routing step's chunk of one event
            event = [time.time(), ["publish", elsewhere, None, None], f"other-{n}", n, ""]
            return orjson.dumps({"epoch": "later", "first": n, "width": 5, "fields": event})

        later = [chunk(n) for n in range(1, 2001)]
        store.rpush(journal_key(service.env["XUMP_STORE"]), *later)
        store.close()
        answer = client.get(f"/api/messages/{mid}/trace")
    assert answer.status_code == 200, answer.text
    assert [step["kind"] for step in answer.json()["steps"]] == ["publish"]


def test_explain_shows_nothing_of_queues_the_caller_may_not_read(service) -> None:
    """A reader of A whose message would move on into a queue it may not read learned that
    queue's depth, selectors (a filter's text and value, a target), verdicts and
    dead-letter queue: the walk is cut where it enters it. (The secret queue moves on into
    a queue, not to a destination: a destination nobody reads is away after the delivery
    timeout, and the move into the secret queue is then held, as a wolfpack's is.)"""
    with service.client() as client:
        letters, inner = make_queue(client), make_queue(client)
        secret = make_queue(client, dead_letter=letters)
        queue = make_queue(client)
        made = client.post(f"/api/queues/{queue}/selectors", json={
            "when": "always", "action": "move", "target": secret, "enabled": True})  # fmt: skip
        assert made.status_code == 201, made.text
        made = client.post(f"/api/queues/{secret}/selectors", json={
            "when": "filter", "filter": "password = 'hunter2'", "action": "move",
            "target": inner, "enabled": True})  # fmt: skip
        assert made.status_code == 201, made.text
        whole = client.post(f"/api/queues/{queue}/explain", json={"headers": {"password": "x"}})
        assert [step["queue"] for step in whole.json()["steps"]] == [queue, secret, letters]
    reader = issue(service, {queue: ["read"], letters: ["read"]})
    with service.client(reader) as stranger:
        said = stranger.post(f"/api/queues/{queue}/explain", json={"headers": {"password": "x"}})
    assert said.status_code == 200, said.text
    steps = said.json()["steps"]
    assert [step["queue"] for step in steps] == [queue, None], (whole.json(), said.json())
    assert steps[0]["selectors"][0]["target"] == secret  # A's own selector, readable there
    beyond = str([steps[1:], said.json()["ends"]])
    assert secret not in beyond and "hunter2" not in said.text and inner not in said.text
    assert letters not in said.text  # readable, but reached through the secret queue
    assert steps[1]["hidden"] and steps[1]["from"] == {"queue": queue, "selector": 1}
    assert said.json()["ends"] == [
        {"queue": None, "outcome": "out_of_sight", "said": "goes on into a queue you may not read"}
    ]


def test_explain_does_not_tell_whether_a_named_queue_the_caller_may_not_read_exists(
    service,
) -> None:
    """A selector whose target the message names (target_from): a reader of its queue could
    name any queue and see whether it exists and how it is wired."""
    with service.client() as client:
        queue, hidden = make_queue(client), make_queue(client)
        named = {"when": "always", "action": "move", "target_from": "header:to", "enabled": True}
        made = client.post(f"/api/queues/{queue}/selectors", json=named)
        assert made.status_code == 201, made.text
    reader = issue(service, {queue: ["read"]})
    answers = []
    with service.client(reader) as stranger:
        for name in (hidden, f"{hidden}-none"):
            said = stranger.post(f"/api/queues/{queue}/explain", json={"headers": {"to": name}})
            assert said.status_code == 200, said.text
            assert name not in said.text
            answers.append(said.json())
    assert answers[0] == answers[1]
    assert answers[0]["steps"][0]["selectors"][0]["target_hidden"]


def test_a_trace_over_two_routers_journals_interleaves_them_by_time(service) -> None:
    """The routers of two shards each keep a journal (an epoch of their own): a message that
    goes to the other shard and comes back has events in both, interleaved. They were
    listed one epoch after the other; each epoch stays in its own (recording) order, which
    the times of its events may not follow exactly."""
    import orjson
    import redis

    from xumpweb.analytics.journal import journal_key

    mid = unique("crossing")
    here, there = unique(), unique()

    def chunk(epoch: str, first: int, events: list[tuple[float, str, str]]) -> bytes:
        fields = []
        for at, kind, queue in events:
            fields += [at, [kind, queue, 1, None], mid, "copy" if kind == "route" else None, None]
        return orjson.dumps({"epoch": epoch, "first": first, "width": 5, "fields": fields})

    store = redis.Redis.from_url(service.env["XUMP_REDIS_URL"])
    store.rpush(journal_key(service.env["XUMP_STORE"]),
                chunk("left", 1, [(10.0, "route", here), (11.0, "route", here)]),
                chunk("right", 1, [(12.0, "route", there), (11.995, "delete", there)]),
                chunk("left", 3, [(14.0, "delete", here)]))  # fmt: skip
    store.close()
    with service.client() as client:
        answer = client.get(f"/api/messages/{mid}/trace")
    assert answer.status_code == 200, answer.text
    order = [(step["epoch"], step["position"]) for step in answer.json()["steps"]]
    assert order == [("left", 1), ("left", 2), ("right", 1), ("right", 2), ("left", 3)]
