"""Login rate limiting (django-axes): after XUMP_LOGIN_FAILURES wrong passwords for one
user name from one address, that pair is refused with a clear 429 page, on the console's
login page and the admin's alike; a successful login clears the count. The HTTPS settings
(XUMP_HTTPS) make the cookies Secure and send HSTS."""

from __future__ import annotations

import json
import re
import subprocess

import httpx
import pytest

from tests.web.conftest import PYTHON, ROOT, unique

LIMIT = 5  # the default XUMP_LOGIN_FAILURES


def make_user(service, staff: bool = False) -> str:
    name = unique("user")
    service.shell(
        "from django.contrib.auth.models import User\n"
        f"User.objects.create_user({name!r}, '', 'right-password', is_staff={staff!r})"
    )
    return name


def attempt(browser: httpx.Client, path: str, user: str, password: str) -> httpx.Response:
    form = browser.get(path)
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
    return browser.post(path, data={
        "username": user, "password": password, "csrfmiddlewaretoken": csrf,
    })  # fmt: skip


@pytest.mark.parametrize("path", ["/login/", "/admin/login/"])
def test_it_locks_a_user_out_after_too_many_wrong_passwords(service, path):
    user = make_user(service, staff=True)
    with httpx.Client(base_url=service.url) as browser:
        for _ in range(LIMIT - 1):
            answer = attempt(browser, path, user, "wrong")
            assert answer.status_code == 200  # the form again, with its error
        locked = attempt(browser, path, user, "wrong")
        assert locked.status_code == 429
        assert "Too many failed logins" in locked.text
        # locked: even the right password is refused now, with the same page (not a 500)
        again = attempt(browser, path, user, "right-password")
        assert again.status_code == 429 and "Too many failed logins" in again.text
        assert "sessionid" not in browser.cookies
    with httpx.Client(base_url=service.url) as other:  # another user from the same address
        answer = attempt(other, path, make_user(service, staff=True), "right-password")
        assert answer.status_code == 302 and "sessionid" in other.cookies


def test_a_successful_login_clears_the_failures(service):
    user = make_user(service)
    with httpx.Client(base_url=service.url) as browser:
        for _ in range(LIMIT - 1):
            assert attempt(browser, "/login/", user, "wrong").status_code == 200
        assert attempt(browser, "/login/", user, "right-password").status_code == 302
    with httpx.Client(base_url=service.url) as browser:
        for _ in range(LIMIT - 1):
            assert attempt(browser, "/login/", user, "wrong").status_code == 200
        assert attempt(browser, "/login/", user, "right-password").status_code == 302


CHECK_HTTPS = """
import json
import django
django.setup()
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
call_command("migrate", verbosity=0)
User.objects.create_user("https-user", "", "right-password")
client = Client()
secure = client.get("/login/", secure=True)
logged = client.post("/login/", {"username": "https-user", "password": "right-password",
    "csrfmiddlewaretoken": client.cookies["csrftoken"].value}, secure=True)
plain = Client().get("/login/")
print(json.dumps({
    "hsts": secure.headers.get("Strict-Transport-Security"),
    "plain_hsts": plain.headers.get("Strict-Transport-Security"),
    "csp": secure.headers.get("Content-Security-Policy"),
    "csrf_secure": bool(secure.cookies["csrftoken"]["secure"]),
    "session_secure": bool(logged.cookies["sessionid"]["secure"]),
    "session_httponly": bool(logged.cookies["sessionid"]["httponly"]),
}))
"""


@pytest.mark.parametrize("https", [True, False])
def test_https_makes_cookies_secure_and_sends_hsts(service, tmp_path, https):
    env = dict(
        service.env,
        DATABASE_URL=f"sqlite:///{tmp_path}/https.sqlite3",
        XUMP_ALLOWED_HOSTS="testserver",
    )
    if https:
        env["XUMP_HTTPS"] = "1"
    ran = subprocess.run([PYTHON, "-c", CHECK_HTTPS], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    found = json.loads(ran.stdout.strip().splitlines()[-1])
    assert found["plain_hsts"] is None  # never over plain HTTP
    assert "script-src 'self'" in found["csp"]
    assert found["session_httponly"] is True
    if https:
        assert found["hsts"] == "max-age=31536000"
        assert found["csrf_secure"] is True and found["session_secure"] is True
    else:
        assert found["hsts"] is None
        assert found["csrf_secure"] is False and found["session_secure"] is False


CHECK_PROXY = """
import json
import django
django.setup()
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
call_command("migrate", verbosity=0)
User.objects.create_user("proxied", "", "right-password")

def attempt(password, forwarded, peer="10.0.0.7"):
    client = Client(REMOTE_ADDR=peer, HTTP_X_FORWARDED_FOR=forwarded)
    client.get("/login/")
    return client.post("/login/", {"username": "proxied", "password": password,
        "csrfmiddlewaretoken": client.cookies["csrftoken"].value}).status_code

failed = [attempt("wrong", "203.0.113.1, 10.0.0.8") for _ in range(LIMIT)]
print(json.dumps({
    "failed": failed,
    "same_client": attempt("right-password", "203.0.113.1"),
    "other_client": attempt("right-password", "198.51.100.2"),
    "spoofed_from_outside": attempt("right-password", "203.0.113.1", peer="192.0.2.9"),
}))
"""


@pytest.mark.parametrize("trusted", ["10.0.0.0/24", ""])
def test_behind_a_trusted_proxy_the_limit_counts_per_forwarded_address(service, tmp_path, trusted):
    """Issue 21: behind a proxy every user shared the proxy's address, so one user's wrong
    passwords locked everyone out. With XUMP_TRUSTED_PROXIES the forwarded address counts
    (the right-most one that is not a trusted proxy), and only when the connection comes
    from a trusted proxy; without it X-Forwarded-For is ignored."""
    env = dict(
        service.env,
        DATABASE_URL=f"sqlite:///{tmp_path}/proxy.sqlite3",
        XUMP_ALLOWED_HOSTS="testserver",
        XUMP_TRUSTED_PROXIES=trusted,
    )
    ran = subprocess.run([PYTHON, "-c", f"LIMIT = {LIMIT}\n" + CHECK_PROXY], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    found = json.loads(ran.stdout.strip().splitlines()[-1])
    assert found["failed"] == [200] * (LIMIT - 1) + [429]
    assert found["same_client"] == 429
    if trusted:
        assert found["other_client"] == 302  # another user behind the same proxy
    else:
        assert found["other_client"] == 429  # one address: the proxy's
    # a peer that is no trusted proxy counts by its own address, whatever header it sends
    assert found["spoofed_from_outside"] == 302
