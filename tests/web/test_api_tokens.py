"""/api/tokens: issue (secret shown once), list, revoke. Programs manage tokens only with
manage on '*'; console users' own tokens are covered in test_roles.py."""

from __future__ import annotations

import json

import httpx

from tests.web.conftest import unique


def test_it_works(service) -> None:
    with service.client() as client:
        issued = client.post("/api/tokens", json={"name": "orders-app",
                                                  "rights": {"orders.*": ["publish"]}})  # fmt: skip
        assert issued.status_code == 201, issued.text
        secret, token = issued.json()["secret"], issued.json()["token"]
        assert secret.startswith(f"xump_{token['prefix']}_")
        assert token["rights"] == {"orders.*": ["publish"]} and token["revoked"] is None
        listed = client.get("/api/tokens").json()["tokens"]
        shown = next(t for t in listed if t["id"] == token["id"])
        assert "secret" not in shown and secret not in str(listed)
        with service.client(secret) as program:
            assert program.get("/api/queues").status_code == 200
        revoked = client.delete(f"/api/tokens/{token['id']}")
        assert revoked.status_code == 200 and revoked.json()["revoked"]
        with service.client(secret) as program:
            answer = program.get("/api/queues")
        assert answer.status_code == 401 and answer.json()["error"] == "unauthorized"


def test_it_validates_ownership(service) -> None:
    """Tokens without manage on '*' manage no tokens."""
    with service.client() as client:
        wanted = {"name": "narrow", "rights": {"orders": ["manage"]}}
        narrow = client.post("/api/tokens", json=wanted).json()
    with service.client(narrow["secret"]) as program:
        assert program.get("/api/tokens").status_code == 403
        made = program.post("/api/tokens", json={"name": "x", "rights": {"*": ["manage"]}})
        assert made.status_code == 403 and made.json()["error"] == "forbidden"
        assert program.delete(f"/api/tokens/{narrow['token']['id']}").status_code == 403


def test_it_validates_rights(service) -> None:
    with service.client() as client:
        for body in [
            {"name": "x", "rights": {"*": ["fly"]}},
            {"name": "x", "rights": ["publish"]},
            {"name": "", "rights": {}},
            {"name": "x", "rights": {"": ["publish"]}},
        ]:
            assert client.post("/api/tokens", json=body).status_code == 400, body
        assert client.delete("/api/tokens/987654").status_code == 404


def test_changes_are_audited_under_the_token_name(service) -> None:
    name = unique("audited")
    with service.client() as client:
        client.post("/api/tokens", json={"name": name, "rights": {}})
    done = service.manage(
        "shell", "-c",
        "from xumpweb.wiring.models import AuditEvent\n"
        f"e = AuditEvent.objects.get(action='token.create', subject__startswith={name!r})\n"
        "print(e.who)",
    )  # fmt: skip
    assert done.stdout.strip().splitlines()[-1] == "token:tests"


def test_a_token_narrowed_in_a_transaction_is_looked_up_again_once_committed(service) -> None:
    """The admin's forms and a definitions import change tokens inside a transaction: the
    tokens' version moved at the save, before the commit, so a publish between the two read
    the old row and was remembered under the new version; after the commit the token kept
    its old rights (HTTP for a minute, an open WebSocket for good). The version moves again
    at the commit."""
    queue = unique("narrowed")
    with service.client() as client:
        assert client.post("/api/queues", json={"name": queue}).status_code == 201
        rights = {queue: ["publish"]}
        issued = client.post("/api/tokens", json={"name": unique("t"), "rights": rights}).json()
    url = f"{service.url}/api/queues/{queue}/publish"
    headers = {"Authorization": f"Bearer {issued['secret']}"}
    # its first use is written to the token's row: not while the transaction below holds
    # SQLite's write lock
    assert httpx.post(url, json={"body": "before"}, headers=headers).status_code == 202
    code = f"""
import json, httpx
from django.db import transaction
from xumpweb.wiring.models import ApiToken
token = ApiToken.objects.get(pk={issued["token"]["id"]})
with transaction.atomic():
    token.rights = {{"somewhere-else": ["publish"]}}
    token.save()
    during = httpx.post({url!r}, json={{"body": "during"}}, headers={headers!r}).status_code
after = httpx.post({url!r}, json={{"body": "after"}}, headers={headers!r}).status_code
print(json.dumps([during, after]))
"""
    during, after = json.loads(service.shell(code).splitlines()[-1])
    assert during == 202  # not committed yet: the old rights still hold
    assert after == 403


def test_the_console_and_the_api_refuse_the_same_rights(service, console) -> None:
    """The API refused a rights key over 200 characters; the console's token form took it,
    and ten thousand lines of them. One rule for both: 1 to 200 characters, 1,000 keys."""
    from tests.web.conftest import console_form

    many = {f"{unique('k')}-{n}": ["read"] for n in range(1001)}
    cases = [({"q" * 201: ["read"]}, "queue name or glob of 1 to 200"), (many, "at most 1000")]
    with service.client() as client:
        for rights, said in cases:
            made = client.post("/api/tokens", json={"name": unique("t"), "rights": rights})
            assert made.status_code == 400 and said in made.json()["detail"], made.text
            lines = "\n".join(f"{pattern}: read" for pattern in rights)
            name = unique("t")
            _, fields = console_form(console, "/tokens/", name=name, rights=lines)
            answer = console.post("/tokens/", data=fields)
            assert answer.status_code == 200 and said in answer.text, answer.text[:300]
            listed = client.get("/api/tokens").json()["tokens"]
            assert name not in [token["name"] for token in listed]
