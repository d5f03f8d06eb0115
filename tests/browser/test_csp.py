"""The Content-Security-Policy (xumpweb/security.py) holds on every page: the header is
sent, and no page breaks it: no inline script, no inline handler, no injected style, no
eval (each would show as a `securitypolicyviolation` event and a console error)."""

from __future__ import annotations

import pytest

from tests.browser.test_accessibility import PAGES, wiring  # noqa: F401 (a fixture)

MORE = ["/analytics/", "/analytics/new/", "/admin/", "/admin/wiring/queue/",
        "/admin/wiring/queue/add/", "/admin/auth/user/", "/api/docs"]  # fmt: skip
WATCH = """() => {
  window.__violations = [];
  document.addEventListener('securitypolicyviolation', e => window.__violations.push(
    e.violatedDirective + ' blocked ' + (e.blockedURI || 'inline') + ' at ' + e.sourceFile
    + ':' + e.lineNumber));
}"""


def violations_on(page, path: str) -> list[str]:
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.add_init_script(script=f"({WATCH})()")
    answer = page.goto(path)
    assert answer.status < 400, (path, answer.status)
    policy = answer.headers.get("content-security-policy", "")
    assert "script-src 'self'" in policy and "'unsafe-eval'" not in policy, policy
    page.wait_for_load_state("load")
    if path == "/topology/":
        page.wait_for_function("() => window.xumpTopology && window.xumpTopology.nodes().length")
    if path == "/":  # the live feed and a poll of the rows (htmx swaps) have run
        page.locator("#live-state", has_text="live").wait_for()
        page.evaluate("() => htmx.trigger('#queue-table', 'refresh')")
        page.wait_for_function("() => !document.querySelector('#queue-table.htmx-request')")
    if path == "/api/docs":  # Swagger UI drew the API, not a blank page
        page.get_by_text("/api/queues/{queue}/publish", exact=True).first.wait_for()
    found = page.evaluate("() => window.__violations")
    return found + [e for e in errors if "Content Security Policy" in e]


@pytest.mark.parametrize("path", PAGES + MORE)
def test_no_page_breaks_the_content_security_policy(page, wiring, path):  # noqa: F811
    assert violations_on(page, path.format(**wiring)) == []
    assert not page.errors


def test_the_login_page_too(anonymous):
    assert violations_on(anonymous, "/login/") == []
