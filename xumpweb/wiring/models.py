"""The wiring as Django models: the engine's catalog in the service (catalog.py adapts them).

Stores, queues and selectors are written by the routing process's engine through
`DjangoCatalog`, so they always say what the engine runs; people change them through the
API, the console or the admin, which send the change to that engine (xumpweb/runtime.py).
A DestinationHome keeps the shard a destination's subscribers read, recorded with the
first DELIVER to it (xumpweb/shards.py). Patterns are declarations that compile to queues
and selectors; ApiTokens carry per-queue rights; QueueGrants give operators the same kind
of rights (xumpweb/access.py decides with both); AuditEvents record who changed what.
"""

from __future__ import annotations

import fnmatch
import hashlib
import secrets
from collections.abc import Iterable

from django.conf import settings
from django.db import models


class Store(models.Model):
    KINDS = [("redis", "Redis"), ("sql", "SQL"), ("ram", "RAM")]

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=10, choices=KINDS)
    url = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Queue(models.Model):
    name = models.CharField(max_length=200, unique=True)
    store = models.ForeignKey(Store, on_delete=models.PROTECT, related_name="queues")
    limit = models.PositiveIntegerField(null=True, blank=True, help_text="empty: unbounded")
    history = models.PositiveIntegerField(default=0)
    dead_letter = models.CharField(max_length=200, null=True, blank=True)
    self_destruct = models.BooleanField(default=False)
    journal = models.BooleanField(
        default=True, help_text="record its events in the journal the archive exports"
    )
    # message lifetime (SPEC §8, docs/lifetime.md); the engine validates them
    max_deliveries = models.PositiveIntegerField(
        null=True, blank=True, help_text="empty: no limit; else dead-lettered past it"
    )
    redelivery_delay = models.FloatField(
        null=True, blank=True, help_text="seconds a retried message waits; empty: none"
    )
    redelivery_backoff = models.FloatField(default=1.0, help_text="the wait's multiplier")
    redelivery_delay_max = models.FloatField(
        null=True, blank=True, help_text="the wait's cap in seconds; empty: none"
    )
    ttl = models.FloatField(null=True, blank=True, help_text="seconds; empty: never expire")
    priorities = models.PositiveSmallIntegerField(
        default=1, help_text="priority levels 1-10, fixed at creation"
    )
    last_selector_id = models.PositiveIntegerField(default=0, editable=False)
    mailbox = models.BooleanField(
        default=False,
        editable=False,
        help_text="made by a STOMP SEND or SUBSCRIBE to /queue/<name> (SPEC §9)",
    )
    created = models.DateTimeField(auto_now_add=True)
    changed = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Selector(models.Model):
    WHEN = [("match", "match / filter"), ("always", "always"), ("default", "default"),
            ("overflow", "overflow")]  # fmt: skip
    OPERATORS = [("eq", "eq"), ("topic", "topic"), ("prefix", "prefix"), ("regex", "regex")]
    ACTIONS = [("copy", "copy"), ("move", "move"), ("deliver", "deliver"),
               ("delete", "delete"), ("bounce", "bounce")]  # fmt: skip

    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="selectors")
    number = models.PositiveIntegerField(help_text="the selector id, per queue")
    when = models.CharField(max_length=10, choices=WHEN, null=True, blank=True)
    match_operator = models.CharField(max_length=10, choices=OPERATORS, blank=True, default="")
    match_pattern = models.CharField(max_length=1000, blank=True, default="")
    match_field = models.CharField(max_length=200, blank=True, default="address")
    filter = models.TextField(null=True, blank=True)
    action = models.CharField(max_length=10, choices=ACTIONS, null=True, blank=True)
    target = models.CharField(max_length=200, null=True, blank=True)
    enabled = models.BooleanField(default=False)
    start = models.CharField(max_length=30, default="current")
    credit = models.IntegerField(default=-1, help_text="-1: unlimited")
    more_matches = models.JSONField(
        default=list,
        blank=True,
        help_text="match conditions after the first: [[operator, pattern, field], ...]; "
        "all must hold",
    )
    target_from = models.CharField(
        max_length=210,
        null=True,
        blank=True,
        help_text="the field naming each message's target (instead of target)",
    )

    class Meta:
        ordering = ["queue__name", "number"]
        constraints = [
            models.UniqueConstraint(fields=["queue", "number"], name="selector_number_per_queue")
        ]

    def __str__(self) -> str:
        return f"{self.queue.name}#{self.number}"

    def describe(self) -> str:
        """WHEN → DO in words, as the console and the API say it."""
        from engine.selectors import describe_in_words

        match = None
        if self.when == "match" and self.match_operator:
            match = (self.match_operator, self.match_pattern, self.match_field or "address")
        expression = self.filter if self.when == "match" else None
        more = tuple(tuple(m) for m in self.more_matches or ()) if match is not None else ()
        return describe_in_words(
            self.when or None, match, expression, self.action, self.target, more, self.target_from
        )


class DestinationHome(models.Model):
    """The shard (store) whose outbox a destination's subscribers read: recorded by the
    catalog when the first selector that DELIVERs to it is, kept while any does, so that
    adding shards moves no destination (xumpweb/shards.py, docs/scaling.md)."""

    destination = models.CharField(max_length=200, unique=True)
    store = models.CharField(max_length=200, help_text="the shard its subscribers read")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["destination"]

    def __str__(self) -> str:
        return f"{self.destination} @ {self.store}"


class Pattern(models.Model):
    """A housecat, parrot or wolfpack declaration; saving it builds its queues and
    selectors through engine.patterns (idempotent), deleting it removes what it built."""

    KINDS = [("housecat", "housecat (direct)"), ("parrot", "parrot (publish/subscribe)"),
             ("wolfpack", "wolfpack (work distribution)")]  # fmt: skip

    kind = models.CharField(max_length=10, choices=KINDS)
    name = models.CharField(max_length=200, help_text="recipient, subscriber or worker")
    router = models.CharField(max_length=200, help_text="router or service queue")
    topic = models.CharField(max_length=1000, blank=True, default="")
    credit = models.IntegerField(default=1)
    built_queue = models.CharField(max_length=200, blank=True, default="", editable=False)
    built_selectors = models.JSONField(default=list, editable=False)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["kind", "router", "name"]
        constraints = [
            models.UniqueConstraint(fields=["kind", "router", "name"], name="one_pattern_each")
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.router} -> {self.name}"


class ApiToken(models.Model):
    """A program's credentials. Only a hash of the secret is kept; the secret is shown once.
    `rights` maps a queue name or glob ("*", "orders.*") to a list of rights among
    read, publish, consume and manage (consume and manage include read), and metrics
    (on "*": reading /metrics, xumpweb/access.py)."""

    RIGHTS = ("read", "publish", "consume", "manage", "metrics")
    LONGEST_PATTERN = 200  # characters of a queue name or glob, as queue names have
    MOST_PATTERNS = 1000  # queue names or globs a token's rights name

    name = models.CharField(max_length=200)
    prefix = models.CharField(max_length=12, unique=True, editable=False)
    secret_hash = models.CharField(max_length=64, editable=False)
    rights = models.JSONField(default=dict)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True
    )
    created = models.DateTimeField(auto_now_add=True)
    revoked = models.DateTimeField(null=True, blank=True)
    last_used = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}...)"

    @classmethod
    def patterns_problem(cls, patterns: Iterable[str]) -> str | None:
        """Why a token's rights may not name `patterns` (the API's and the console's one
        rule), or None."""
        patterns = list(patterns)
        if len(patterns) > cls.MOST_PATTERNS:
            return f"a token's rights name at most {cls.MOST_PATTERNS} queues or globs"
        for pattern in patterns:
            if not pattern or len(pattern) > cls.LONGEST_PATTERN:
                return (f"a rights key is a queue name or glob of 1 to {cls.LONGEST_PATTERN} "
                        "characters")  # fmt: skip
        return None

    @classmethod
    def issue(cls, name: str, rights: dict[str, list[str]], user=None) -> tuple[ApiToken, str]:
        """A new token and its secret (`xump_<prefix>_<secret>`), which is never stored."""
        prefix = secrets.token_hex(4)
        secret = secrets.token_urlsafe(24)
        token = cls.objects.create(
            name=name, prefix=prefix, secret_hash=_digest(secret), rights=rights, user=user
        )
        return token, f"xump_{prefix}_{secret}"

    @classmethod
    def find(cls, presented: str) -> ApiToken | None:
        """The live token `presented` stands for, or None."""
        parts = presented.split("_", 2)
        if len(parts) != 3 or parts[0] != "xump":
            return None
        token = cls.objects.filter(prefix=parts[1], revoked__isnull=True).first()
        if token is None or not secrets.compare_digest(token.secret_hash, _digest(parts[2])):
            return None
        return token

    def allows(self, right: str, queue: str) -> bool:
        """The token's own rights only; what its owner may do bounds them too, so ask
        xumpweb.access, not this."""
        return rights_allow(self.rights, right, queue)


def rights_allow(rights: dict[str, list[str]], right: str, queue: str) -> bool:
    """Whether `rights` (queue name or glob -> rights) give `right` on `queue`; consume
    and manage include read."""
    wanted = IMPLIED_BY.get(right, (right,))
    return any(
        fnmatch.fnmatchcase(queue, pattern) and any(r in granted for r in wanted)
        for pattern, granted in rights.items()
    )


IMPLIED_BY = {"read": ("read", "consume", "manage")}


class QueueGrant(models.Model):
    """Rights on the queues a glob names, for one user or every member of one group: the
    operator role's scope (xumpweb/access.py). Counted only for users whose role lets them
    operate (the "operator" group, or the `wiring.operate_queues` permission)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True,
        related_name="queue_grants",
    )  # fmt: skip
    group = models.ForeignKey(
        "auth.Group", on_delete=models.CASCADE, null=True, blank=True, related_name="queue_grants"
    )
    queues = models.CharField(
        max_length=200, help_text='a queue name or glob: "jobs*", "orders", "*"'
    )
    rights = models.JSONField(default=list, help_text="among read, publish, consume, manage")

    class Meta:
        ordering = ["queues"]
        permissions = [
            ("read_everything", "Read every queue, selector, message and page (viewer)"),
            (
                "operate_queues",
                "Publish, purge, handle dead letters, change selectors and "
                "queues within the queue grants (operator)",
            ),
            ("administer", "Users, tokens of others, stores, patterns, definitions (admin)"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(user__isnull=False, group__isnull=True)
                | models.Q(user__isnull=True, group__isnull=False),
                name="grant_to_a_user_or_a_group",
            )
        ]

    def __str__(self) -> str:
        holder = self.user or self.group
        return f"{holder}: {self.queues}: {', '.join(self.rights)}"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class AuditEvent(models.Model):
    when = models.DateTimeField(auto_now_add=True, db_index=True)
    who = models.CharField(max_length=200)
    action = models.CharField(max_length=100)
    subject = models.CharField(max_length=500, blank=True, default="")
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-when", "-id"]

    def __str__(self) -> str:
        return f"{self.when:%Y-%m-%d %H:%M:%S} {self.who} {self.action} {self.subject}"
