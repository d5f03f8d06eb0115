"""The Content-Security-Policy (xumpweb/security.py) holds on every page: the header is
sent, and no page breaks it: no inline script, no inline handler, no injected style, no
eval (each would show as a `securitypolicyviolation` event and a console error). The
console's pages are checked in the same visit as their accessibility
(test_accessibility.py's PAGES); these are the others, and the login page."""

from __future__ import annotations

import pytest

from tests.browser.conftest import csp_visit

MORE = ["/analytics/", "/analytics/new/", "/admin/", "/admin/wiring/queue/",
        "/admin/wiring/queue/add/", "/admin/auth/user/", "/api/docs"]  # fmt: skip


def violations_on(page, path: str) -> list[str]:
    return csp_visit(page, path)()


@pytest.mark.parametrize("path", MORE)
def test_no_other_page_breaks_the_content_security_policy(page, path):
    assert violations_on(page, path) == []
    assert not page.errors


def test_the_login_page_too(anonymous):
    assert violations_on(anonymous, "/login/") == []
