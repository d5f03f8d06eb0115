"""A regex selector cannot stall the router (issue 12, item 3): with `(a+)+$` on a queue and
hostile addresses published to it, other traffic is still routed. Before regexes ran on
RE2, one 28-character address held the router (and its lease) for minutes."""

from __future__ import annotations

import time

from tests.web.conftest import unique


def test_hostile_addresses_against_a_catastrophic_regex_do_not_stall_routing(service) -> None:
    source, hostile, fine = unique("rx"), unique("rx-hit"), unique("rx-ok")
    with service.client() as client:
        for name in (source, hostile, fine):
            assert client.post("/api/queues", json={"name": name}).status_code == 201
        for match, target in (({"operator": "regex", "pattern": "(a+)+$"}, hostile),
                              ({"operator": "eq", "pattern": "ok"}, fine)):  # fmt: skip
            made = client.post(f"/api/queues/{source}/selectors", json={
                "when": "match", "match": match, "action": "copy", "target": target,
                "enabled": True})  # fmt: skip
            assert made.status_code == 201, made.text
        messages = []
        for n in range(50):
            messages.append({"address": "a" * (28 + n * 100) + "b"})
            messages.append({"address": "ok"})
        answer = client.post(f"/api/queues/{source}/publish-batch", json={"messages": messages})
        assert answer.status_code == 202, answer.text
        # the ordinary messages arrive (a generous deadline: a backtracking regex would
        # take longer than the age of the universe)
        deadline = time.monotonic() + 60
        while client.get(f"/api/queues/{fine}/stats").json()["published"] < 50:
            assert time.monotonic() < deadline, "routing stalled behind the hostile addresses"
            time.sleep(0.05)
        assert client.get(f"/api/queues/{hostile}/stats").json()["published"] == 0
        # the router still answers wiring changes at once
        assert client.delete(f"/api/queues/{source}/selectors/1").status_code == 200
