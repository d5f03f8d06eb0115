"""The `can` template tag (a builtin, see settings.TEMPLATES): whether the page's user may
do an action, so templates show only the buttons and forms the role allows:

    {% can "purge" queue.name as may_purge %}{% if may_purge %}...{% endif %}
    {% can "patterns" as may_build %}

It asks xumpweb/access.py, the same rule the views enforce (a hidden button is a
convenience; the view still answers 403)."""

from __future__ import annotations

from typing import Any

from django import template

from xumpweb import access

register = template.Library()


@register.simple_tag(takes_context=True)
def can(context: Any, action: str, queue: str | None = None) -> bool:
    request = context.get("request")
    if request is None:
        return False
    principal = access.for_request(request)
    if access.QUEUE_ACTIONS.get(action) and queue is None:
        return False
    return principal.has_role and access.may(principal, action, queue)


@register.simple_tag(takes_context=True)
def role(context: Any) -> str:
    """The page's user's role: admin, operator, viewer or none."""
    request = context.get("request")
    return access.for_request(request).role if request is not None else "none"
