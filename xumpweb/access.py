"""Who may do what: the one place that decides, for the console, the API and the WebSockets.

A *principal* is who asks: a console user (by session) or an API token. An *action* is what
they want, on a queue or on the service as a whole (`may(principal, action, queue)`):

  read              see a queue: settings, selectors, history, waiting messages, stats
  publish           publish to a queue
  consume           take a destination's deliveries (WebSocket), confirm, reject
  manage            (also as manage-queue, manage-selectors, purge, deadletter, operate,
                    disconnect) create, change and delete a queue and its selectors, purge
                    it, send on or delete dead letters (console/deadletters.py: deadletter on
                    the dead-letter queue or on the queue a dead letter came from, and
                    publish where it goes), move / copy / delete / re-route its waiting
                    messages (operate; moving or copying also needs publish on the target),
                    close a subscriber of a destination of that name (disconnect)
  analytics         start analytics runs and archive exports (operators and admins)
  users, tokens-for-others, stores, patterns, definitions, refused    admins only
  read-all          read every queue (the monitor, the audit log, the refused commands)
  metrics           read /metrics (every queue's figures): admins, and tokens or operators
                    holding the `metrics` right on '*'
  console           see the console at all (any role)

Queue actions come down to the four rights an ApiToken carries per queue name or glob:
read, publish, consume, manage (consume and manage include read); a fifth, metrics, given
on '*', lets a program (a Prometheus server) read /metrics and nothing else. Roles give
console users rights of the same shape; they are Django groups
(wiring/migrations/0004_role_groups.py) that admins change in the Django admin, and what
counts is their permissions:
* viewer   (`wiring.read_everything`): read on every queue; changes nothing;
* operator (`wiring.operate_queues`): a viewer, plus the rights of the QueueGrants given
  to the user or one of their groups (e.g. `jobs*: publish, consume, manage`);
* admin    (`wiring.administer`; superusers and staff users count as admins): everything.
A user with none of them may log in and sees only a page saying to ask an administrator.

A token holds its own rights, bounded by what its owner may do now: a token made by a user
who is later demoted or deactivated loses what the owner lost. A token without an owner
(made in the Django admin or a shell) holds its own rights. A token is an admin when it has
manage on '*' (and its owner, if any, is an admin). Nobody mints a token with rights they do
not hold (`may_grant`), and only admins see or revoke other people's tokens.

A principal is worked out once per request (users) or once per token lookup (tokens, which
api/auth.py remembers until any token or role changes: api/apps.py connects the signals).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import HttpRequest

from xumpweb.wiring.models import IMPLIED_BY, ApiToken, QueueGrant, rights_allow

RIGHTS = ApiToken.RIGHTS
QUEUE_ACTIONS = {
    "read": "read",
    "publish": "publish",
    "consume": "consume",
    "manage": "manage",
    "manage-queue": "manage",
    "manage-selectors": "manage",
    "purge": "manage",
    "deadletter": "manage",
    "operate": "manage",
    "disconnect": "manage",
}
ADMIN_ACTIONS = frozenset({"users", "tokens-for-others", "stores", "patterns", "definitions",
                           "refused"})  # fmt: skip
WILDCARDS = frozenset("*?[")
NO_ROLE = "Your account has no role yet: ask an administrator to make you a viewer, an " \
          "operator or an admin."  # fmt: skip


@dataclass(eq=False)
class Principal:
    """Who asks: `rights` (queue glob -> rights), bounded by `bound` (a token's owner)."""

    name: str
    role: str  # "admin", "operator", "viewer", "token" or "none"
    rights: dict[str, list[str]] = field(default_factory=dict)
    admin: bool = False
    operates: bool = False
    bound: Principal | None = None
    user_id: int | None = None
    token_id: int | None = None

    @property
    def has_role(self) -> bool:
        return self.role != "none"

    def holds(self, right: str, queue: str) -> bool:
        """`right` on the queue named `queue`."""
        if not rights_allow(self.rights, right, queue):
            return False
        return self.bound is None or self.bound.holds(right, queue)

    def holds_all(self, right: str, glob: str) -> bool:
        """`right` on every queue `glob` can name (for minting tokens)."""
        wanted = IMPLIED_BY.get(right, (right,))
        if not any(
            covers(pattern, glob) and any(r in granted for r in wanted)
            for pattern, granted in self.rights.items()
        ):
            return False
        return self.bound is None or self.bound.holds_all(right, glob)


NOBODY = Principal(name="anonymous", role="none")


def covers(pattern: str, glob: str) -> bool:
    """Whether every name `glob` matches is matched by `pattern` (sure answers only: a
    glob is covered by '*', by itself, by a prefix pattern such as 'jobs*' it starts
    with; a plain name by any pattern that matches it)."""
    if pattern in ("*", glob):
        return True
    if not WILDCARDS.intersection(glob):
        return fnmatch.fnmatchcase(glob, pattern)
    stem = pattern[:-1]
    return pattern.endswith("*") and not WILDCARDS.intersection(stem) and glob.startswith(stem)


# -- who asks --------------------------------------------------------------------------------
def for_user(user: Any) -> Principal:
    """The principal of a console user (remembered on the user object)."""
    found = getattr(user, "_xump_principal", None)
    if found is not None:
        return found
    if user is None or not user.is_authenticated or not user.is_active:
        found = NOBODY
    elif user.is_superuser or user.is_staff or user.has_perm("wiring.administer"):
        found = Principal(user.get_username(), "admin", {"*": list(RIGHTS)}, admin=True,
                          operates=True, user_id=user.pk)  # fmt: skip
    else:
        rights: dict[str, list[str]] = {}
        reads = user.has_perm("wiring.read_everything")
        operates = user.has_perm("wiring.operate_queues")
        if reads:
            rights["*"] = ["read"]
        if operates:
            grants = QueueGrant.objects.filter(Q(user=user) | Q(group__in=user.groups.all()))
            for grant in grants:
                held = rights.setdefault(grant.queues, [])
                held += [right for right in grant.rights if right not in held]
        role = "operator" if operates else "viewer" if reads else "none"
        found = Principal(user.get_username(), role, rights, operates=operates, user_id=user.pk)
    if user is not None:
        user._xump_principal = found
    return found


def for_token(token: ApiToken) -> Principal:
    """The principal of an API token (remembered on the token object, which api/auth.py
    remembers until a token or a role changes)."""
    found = getattr(token, "_xump_principal", None)
    if found is not None:
        return found
    owner = for_user(token.user) if token.user_id is not None else None
    manages_all = "manage" in (token.rights.get("*") or [])
    found = Principal(
        name=f"token:{token.name}", role="token", rights=token.rights, bound=owner,
        admin=manages_all and (owner is None or owner.admin), token_id=token.pk,
    )  # fmt: skip
    token._xump_principal = found  # type: ignore[attr-defined]
    return found


def known_principal(token: ApiToken) -> Principal | None:
    """The token's principal if for_token worked it out already (no database), else None."""
    return getattr(token, "_xump_principal", None)


def for_request(request: HttpRequest) -> Principal:
    """The API token the request authenticated with, else its session's user."""
    token = getattr(request, "xump_token", None)
    if token is not None:
        return for_token(token)
    return for_user(getattr(request, "user", None))


# -- the rule --------------------------------------------------------------------------------
def may(principal: Principal, action: str, queue: str | None = None) -> bool:
    """THE rule: whether `principal` may do `action` (on `queue`, for queue actions)."""
    right = QUEUE_ACTIONS.get(action)
    if right is not None:
        if queue is None:
            raise ValueError(f"{action!r} needs a queue")
        return principal.holds(right, queue)
    if action in ADMIN_ACTIONS:
        return principal.admin
    if action == "analytics":
        return principal.admin or principal.operates
    if action == "console":
        return principal.has_role
    if action == "read-all":
        return principal.holds_all("read", "*")
    if action == "metrics":
        return principal.admin or principal.holds_all("metrics", "*")
    raise ValueError(f"unknown action {action!r}")


def may_grant(principal: Principal, rights: dict[str, list[str]]) -> str | None:
    """Why `principal` may not give a token `rights`, or None when it may."""
    for glob, granted in rights.items():
        for right in granted:
            if right == "metrics" and principal.admin:
                continue  # admins read the metrics without holding the right
            if not principal.holds_all(right, glob):
                return f"you may not give {right} on {glob!r}: you do not hold it there"
    return None


def tokens_seen_by(principal: Principal) -> Any:
    """The tokens `principal` may list and revoke: all for admins, else their own."""
    tokens = ApiToken.objects.select_related("user")
    if principal.admin:
        return tokens
    if principal.user_id is None or not principal.has_role:
        return tokens.none()
    return tokens.filter(user_id=principal.user_id)


# -- the console -----------------------------------------------------------------------------
def refuse(principal: Principal, action: str, queue: str | None = None) -> PermissionDenied:
    """The 403 for the console (templates/403.html shows the text)."""
    if not principal.has_role:
        return PermissionDenied(NO_ROLE)
    on = f" on queue {queue!r}" if queue is not None else ""
    return PermissionDenied(f"Your role ({principal.role}) may not {action}{on}.")


SENDING_ACTIONS = ("copy", "move", "bounce", "deliver")  # a selector's that send messages on


def cannot_send(
    principal: Principal, settings: dict[str, Any], before: dict[str, Any] | None = None
) -> str | None:
    """What a selector's or a queue's `settings` (as its create or update takes them) would
    send messages into that `principal` may not publish to, as the end of a sentence "this
    caller may not ..."; None when nothing. A COPY, MOVE or BOUNCE puts messages into its
    target queue, a DELIVER hands them to its destination's consumers and a dead-letter
    queue gets what the queue cannot route: each needs `publish` there, as sending a message
    there by hand does (else a grant on `jobs*` would reach every queue through a selector).
    A target the message names (`target_from`) may be any queue: that needs publish on
    every queue ('*'). Only what changes from `before` (the selector or queue as it is) is
    checked: an operator may still edit a selector an administrator pointed elsewhere."""
    before = before or {}
    action = settings.get("action", before.get("action"))
    named = settings.get("target_from")
    new_name = named and action in SENDING_ACTIONS and named != before.get("target_from")
    if new_name and not may(principal, "publish", "*"):
        return "send to the queue each message names (target_from needs publish on '*')"
    target = settings.get("target")
    changed = target != before.get("target") or action != before.get("action")
    if target and action in SENDING_ACTIONS and changed and not may(principal, "publish", target):
        return f"send messages to {target!r} (it needs publish there)"
    dead = settings.get("dead_letter")
    if dead and dead != before.get("dead_letter") and not may(principal, "publish", dead):
        return f"dead-letter into {dead!r} (it needs publish there)"
    return None


def check(request: HttpRequest, action: str, queue: str | None = None) -> Principal:
    """The request's principal, or PermissionDenied (a 403 page) unless it may `action`."""
    principal = for_request(request)
    if not principal.has_role or not may(principal, action, queue):
        raise refuse(principal, action, queue)
    return principal


def requires(action: str, queue: str | None = None) -> Callable:
    """Console view decorator: the login page for anonymous users, then `action` (on the
    queue the view's keyword argument `queue` names) or a 403 page."""

    def decorate(view: Callable) -> Callable:
        @wraps(view)
        def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            check(request, action, kwargs.get(queue) if queue else None)
            return view(request, *args, **kwargs)

        return checked

    return decorate
