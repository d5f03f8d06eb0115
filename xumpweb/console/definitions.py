"""The definitions page (admins): download the wiring as one JSON document, paste or edit
one, see what importing it would change (a dry run: nothing changes), then apply it in one
audited step. The rules live in xumpweb/wiring/definitions.py; the page only shows them."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from xumpweb.access import requires
from xumpweb.console.common import CallFailed, call
from xumpweb.runtime import service
from xumpweb.wiring import audit, definitions, imports


def differences(change: dict[str, Any]) -> list[dict[str, str]]:
    """The fields a change sets, with the value before (none for a new item) and after."""
    before, after = change["before"] or {}, change["after"] or {}
    rows = []
    for key, value in after.items():
        if change["change"] == "update" and before.get(key) == value:
            continue
        old = json.dumps(before[key]) if key in before else ""
        rows.append({"field": key, "before": old, "after": json.dumps(value)})
    return rows


@requires("definitions")
def definitions_page(request: HttpRequest) -> HttpResponse:
    context: dict[str, Any] = {"text": "", "answer": None, "problems": None}
    status = 200
    if request.method == "GET" and request.GET.get("current"):
        context["text"] = json.dumps(definitions.export(), indent=2)
    elif request.method == "POST":
        text = request.POST.get("document", "")
        context["text"] = text
        dry_run = "apply" not in request.POST
        try:
            document = json.loads(text)
        except ValueError as error:
            context["problems"] = [f"the document is not JSON: {error}"]
            return render(request, "console/definitions.html", context, status=400)
        try:
            result = definitions.plan(document)
            if dry_run:
                answer = result.answer(dry_run=True)
            elif definitions.is_big(result):  # in steps, in the background
                answer = imports.start(result, audit.actor(request), call, service().redis)
            else:
                answer = definitions.apply(result, audit.actor(request), call)
        except definitions.InvalidDefinitions as invalid:
            context["problems"] = invalid.problems
            status = 400
        except CallFailed as failed:
            context["problems"] = [f"the router refused the change, nothing changed: {failed}"]
            status = 409
        else:
            for change in answer["changes"]:
                change["rows"] = differences(change)
            context["answer"] = answer
    return render(request, "console/definitions.html", context, status=status)
