"""Schemathesis over every operation of the live service's /api/openapi.json: generated
requests, valid and invalid, as an admin token, a token without rights and no token. No
answer may be a 5xx, and every answer must be what the schema says (a documented status,
JSON, a body of the documented shape).

The service is a private one (its own database and Redis store name), since the generated
requests create, change and delete queues, selectors, patterns and tokens at random.
XUMP_SCHEMATHESIS_EXAMPLES sets the admin's examples per operation (default 25); the two
callers without rights get a third as many each, since the authorisation answers before
anything they send is read (about 1,100 requests in all).
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.failures import FailureGroup

from tests.figures import report
from tests.web.conftest import start_service

EXAMPLES = int(os.environ.get("XUMP_SCHEMATHESIS_EXAMPLES", "25"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def private_service(redis_server, tmp_path_factory):
    running = start_service(redis_server.url, tmp_path_factory.mktemp("schemathesis"), "inline")
    yield running
    running.close()


def callers(service) -> dict[str, dict[str, str]]:
    with service.client() as client:
        made = client.post("/api/tokens", json={"name": "no-rights", "rights": {}})
        assert made.status_code == 201, made.text
        powerless = made.json()["secret"]
        # something for the generated requests to find besides what they make themselves
        client.post("/api/queues", json={"name": "orders", "history": 5})
        client.post("/api/queues", json={"name": "done"})
        client.post("/api/queues/orders/selectors", json={
            "when": "always", "action": "move", "target": "done", "enabled": True})  # fmt: skip
    return {  # the admin last: its requests may revoke its own token
        "anonymous": {},
        "no-rights": {"Authorization": f"Bearer {powerless}"},
        "admin": {"Authorization": f"Bearer {service.admin_token}"},
    }


def exercise(
    url: str, operation, caller: str, headers: dict, statuses: Counter, failures: dict
) -> None:
    """Generated requests (valid and invalid) to one operation as one caller: EXAMPLES as
    the admin, a third as many as a caller without rights."""
    strategy = st.one_of(
        operation.as_strategy(GenerationMode.POSITIVE),
        operation.as_strategy(GenerationMode.NEGATIVE),
    )

    @settings(
        max_examples=EXAMPLES if caller == "admin" else max(1, EXAMPLES // 3),
        deadline=None, database=None, derandomize=True,
        phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck),
    )  # fmt: skip
    @given(case=strategy)
    def run(case) -> None:
        # the caller's own credentials, whatever the generated case carries (the negative
        # mode mangles the Authorization header too)
        case.headers = {
            **{k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"},
            **headers,
        }
        response = case.call(base_url=url)
        statuses[caller, response.status_code] += 1
        try:
            case.validate_response(response, checks=CHECKS)
        except FailureGroup as found:  # kept, so that one run reports every failure
            key = f"{caller} {operation.method.upper()} {operation.path}"
            failures.setdefault(key, str(found)[:1500])

    run()


def test_every_operation_answers_as_its_schema_says_and_never_5xx(private_service) -> None:
    service = private_service
    schema = schemathesis.openapi.from_url(service.url + "/api/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    # a generated DELETE /api/tokens/{id} may revoke the caller's own token: last of all
    operations.sort(key=lambda op: (op.method.upper(), op.path) == ("DELETE", "/api/tokens/{id}"))
    assert len(operations) >= 20
    statuses: Counter[tuple[str, int]] = Counter()
    failures: dict[str, str] = {}
    for caller, headers in callers(service).items():
        for operation in operations:
            exercise(service.url, operation, caller, headers, statuses, failures)
    total: Counter[int] = Counter()
    for (_caller, status), count in statuses.items():
        total[status] += count
    lines = [f"{sum(total.values())} requests, statuses {dict(sorted(total.items()))}"]
    for caller in ("admin", "no-rights", "anonymous"):
        mine = {status: n for (who, status), n in sorted(statuses.items()) if who == caller}
        lines.append(f"  {caller}: {mine}")
    report("schemathesis over /api/openapi.json", lines)
    assert not failures, "\n\n".join(f"{key}\n{text}" for key, text in failures.items())
    assert not [status for status in total if status >= 500]
