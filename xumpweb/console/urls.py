"""The console's pages (mounted at the site root by xumpweb/urls.py).

Queue names may hold `/` (QueueName below), so the pages below a queue come before the queue
page itself, and a selector's pages before the queue's (`<queue:name>/delete/` would take
`<name>/selectors/1/delete/`).
"""

from __future__ import annotations

from urllib.parse import unquote

from django.contrib.auth import views as auth
from django.urls import path, register_converter

from xumpweb.console import (
    accounts,
    assets,
    charts,
    dashboard,
    deadletters,
    definitions,
    lineage,
    operations,
    patterns,
    queues,
    selectors,
    topology,
)


class QueueName:
    """A queue name in a console URL. Names may hold `/` and keep it (`orders/eu`), but a
    name with a `.` or `..` segment (`../etc`, `..`) would be folded away by the browser
    before the request is sent (`/queues/../etc/` goes to `/etc/`): such a name goes with
    its `/` and `.` escaped, and `%` is always escaped, so every name comes back whole."""

    regex = ".+"

    def to_python(self, value: str) -> str:
        return unquote(value)

    def to_url(self, value: str) -> str:
        text = value.replace("%", "%25")
        if any(part in (".", "..") for part in value.split("/")):
            text = text.replace("/", "%2F").replace(".", "%2E")
        return text  # reverse() escapes the `%` once more; the server takes one away


register_converter(QueueName, "queue")

app_name = "console"
LOGIN = {
    "template_name": "console/login.html",
    "redirect_authenticated_user": True,
    "next_page": "console:dashboard",
}

urlpatterns = [
    path("", dashboard.dashboard, name="dashboard"),
    path("static/<path:path>", assets.static_file, name="static"),
    path("dashboard/rows/", dashboard.dashboard_rows, name="dashboard_rows"),
    path("dashboard/frame/", dashboard.dashboard_frame, name="dashboard_frame"),
    path("login/", auth.LoginView.as_view(**LOGIN), name="login"),
    path("logout/", auth.LogoutView.as_view(next_page="console:login"), name="logout"),
    path("queues/new/", dashboard.queue_create, name="queue_create"),
    path("queues/<queue:name>/selectors/new/", selectors.selector_new, name="selector_new"),
    path("queues/<queue:name>/selectors/preview/", selectors.preview, name="selector_preview"),
    path(
        "queues/<queue:name>/selectors/<int:number>/enable/",
        selectors.selector_enable,
        name="selector_enable",
    ),
    path(
        "queues/<queue:name>/selectors/<int:number>/delete/",
        selectors.selector_delete,
        name="selector_delete",
    ),
    path("queues/<queue:name>/selectors/<int:number>/", selectors.selector_edit, name="selector"),
    path("queues/<queue:name>/history/", queues.history, name="queue_history"),
    path("queues/<queue:name>/scheduled/", queues.scheduled, name="queue_scheduled"),
    path(
        "queues/<queue:name>/scheduled/cancel/",
        queues.scheduled_cancel,
        name="scheduled_cancel",
    ),
    path("queues/<queue:name>/settings/", queues.queue_settings, name="queue_settings"),
    path("queues/<queue:name>/publish/", queues.publish, name="queue_publish"),
    path("queues/<queue:name>/explain/", queues.explain, name="queue_explain"),
    path("queues/<queue:name>/purge/", queues.purge, name="queue_purge"),
    path("queues/<queue:name>/operate/", operations.queue_operate, name="queue_operate"),
    path("queues/<queue:name>/delete/", queues.queue_delete, name="queue_delete"),
    path("queues/<queue:name>/messages/<int:seq>/", queues.message_detail, name="message"),
    path("queues/<queue:name>/series/", charts.queue_series, name="queue_series"),
    path("queues/<queue:name>/", queues.queue_page, name="queue"),
    path("check/filter/", selectors.validate_filter, name="check_filter"),
    path("check/pattern/", selectors.validate_pattern, name="check_pattern"),
    path("patterns/", patterns.pattern_list, name="patterns"),
    path("patterns/new/<str:kind>/", patterns.pattern_new, name="pattern_new"),
    path("patterns/plan/<str:kind>/", patterns.pattern_plan, name="pattern_plan"),
    path("patterns/<int:number>/delete/", patterns.pattern_delete, name="pattern_delete"),
    path("dead-letters/", deadletters.inspector, name="deadletters"),
    path("dead-letters/act/", deadletters.act, name="deadletters_act"),
    path("dead-letters/refused/clear/", deadletters.refused_clear, name="refused_clear"),
    path("consumers/", operations.consumers, name="consumers"),
    path("consumers/<str:connection>/close/", operations.consumer_close, name="consumer_close"),
    path("topology/", topology.topology, name="topology"),
    path("messages/trace/", lineage.message_trace, name="message_trace"),
    path("topology/graph/", topology.topology_graph, name="topology_graph"),
    path("audit/", accounts.audit_log, name="audit"),
    path("tokens/", accounts.tokens, name="tokens"),
    path("definitions/", definitions.definitions_page, name="definitions"),
    path("tokens/<int:number>/revoke/", accounts.token_revoke, name="token_revoke"),
]
