"""Who may do what: the audit log and API tokens (created with scopes, shown once,
revoked). A user sees and revokes their own tokens (admins every token) and gives a new
token only rights they hold (xumpweb/access.py)."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from xumpweb import access
from xumpweb.access import requires
from xumpweb.console.common import LIST_PAGE, audit
from xumpweb.console.forms import TokenForm
from xumpweb.wiring.models import ApiToken, AuditEvent

AUDIT_PAGE = 50
NEW_SECRET = "console-new-token-secret"  # session key: a new token's secret, shown once


def held(principal: access.Principal) -> str:
    """The rights a user holds, as the token form's lines (what they may give at most)."""
    return "\n".join(f"{glob}: {', '.join(rights)}" for glob, rights in principal.rights.items())


@requires("read-all")
def audit_log(request: HttpRequest) -> HttpResponse:
    events = AuditEvent.objects.all()
    query = request.GET.get("q", "").strip()
    if query:
        events = events.filter(
            Q(who__icontains=query) | Q(action__icontains=query) | Q(subject__icontains=query)
        )
    page = Paginator(events, AUDIT_PAGE).get_page(request.GET.get("page"))
    for event in page:
        event.diff = change_rows(event.before, event.after)
    return render(request, "console/audit.html", {"page": page, "q": query})


def as_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def change_rows(before: Any, after: Any) -> list[dict[str, Any]]:
    """An audit entry's before and after as rows of (field, before, after, changed), values
    as JSON text; a state that is not a mapping is one row with no field name."""
    if not isinstance(before, dict) and not isinstance(after, dict):
        return [{"field": "", "before": "-" if before is None else as_json(before),
                 "after": "-" if after is None else as_json(after),
                 "changed": before != after}]  # fmt: skip
    old = before if isinstance(before, dict) else {}
    new = after if isinstance(after, dict) else {}
    rows = []
    for key in sorted(set(old) | set(new), key=str):
        rows.append({
            "field": str(key),
            "before": as_json(old[key]) if key in old else "-",
            "after": as_json(new[key]) if key in new else "-",
            "changed": key not in old or key not in new or old[key] != new[key],
        })  # fmt: skip
    return rows


@requires("console")
def tokens(request: HttpRequest) -> HttpResponse:
    """Create (POST, then a redirect, so a reload makes no second token) and list tokens.
    A new token's secret rides in the session to the one page that shows it."""
    principal = access.for_request(request)
    if request.method == "POST":
        form = TokenForm(request.POST)
        if form.is_valid():
            problem = access.may_grant(principal, form.cleaned_data["rights"])
            if problem is not None:
                form.add_error("rights", problem)
        if form.is_valid():
            token, secret = ApiToken.issue(
                form.cleaned_data["name"], form.cleaned_data["rights"], user=request.user
            )
            audit(request, "token.create", str(token), None,
                  {"name": token.name, "prefix": token.prefix, "rights": token.rights})  # fmt: skip
            request.session[NEW_SECRET] = secret
            return redirect("console:tokens")
    else:
        form = TokenForm(initial=None if principal.admin else {"rights": held(principal)})
    secret = request.session.pop(NEW_SECRET, None)
    listed = access.tokens_seen_by(principal).order_by("-created", "-pk")
    page = Paginator(listed, LIST_PAGE).get_page(request.GET.get("page"))
    context = {"form": form, "secret": secret, "tokens": page, "page": page,
               "show_owner": principal.admin}  # fmt: skip
    response = render(request, "console/tokens.html", context)
    response["Cache-Control"] = "no-store"  # the secret is in this response only
    return response


@requires("console")
@require_POST
def token_revoke(request: HttpRequest, number: int) -> HttpResponse:
    principal = access.for_request(request)
    token = get_object_or_404(ApiToken, pk=number)
    if not access.tokens_seen_by(principal).filter(pk=number).exists():
        raise access.refuse(principal, "revoke another user's token")
    if token.revoked is None:
        token.revoked = timezone.now()
        token.save(update_fields=["revoked"])
        audit(request, "token.revoke", str(token), {"prefix": token.prefix}, None)
        messages.success(request, f"Revoked {token}.")
    return redirect("console:tokens")
