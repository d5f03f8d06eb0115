"""The Django admin over the wiring, tokens and the audit log (roles: admin_roles.py).

Queues, selectors and their stores are written only by the router's engine (models.py), so
saving or deleting a Queue, Selector or Pattern here sends the change to the router as an
operation (router/operations.py) and then reads back the row the engine wrote. The
operation runs when the form is validated, after Django's own checks, so an engine error
(a bad name, a filter with a mistake at some column, no router answering) shows on the form
as any validation error does, and nothing changed. Every change writes an AuditEvent.

The admin's own transaction around a change is left out for these models: the router (a
worker process, or a thread of this one) writes the catalog while the request waits for its
answer, and on SQLite an open transaction of the request would lock it out.
"""

from __future__ import annotations

import contextvars
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db.models import Q
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html

from engine.core import LIFETIME_OPTIONS
from engine.errors import AlreadyExists, InvalidName, InvalidSelector, XumpError
from engine.filters import compile_filter
from engine.validation import MAX_PRIORITIES, MAX_WIRING
from xumpweb.runtime import service
from xumpweb.wiring import admin_roles, audit
from xumpweb.wiring.models import ApiToken, AuditEvent, Pattern, Queue, Selector, Store

admin.site.site_header = "Xump administration"
admin.site.site_title = "Xump admin"
admin.site.index_title = "Wiring, tokens and audit"
__all__ = ["admin_roles"]  # users, groups and queue grants (roles): admin_roles.py


# -- sending changes to the router -----------------------------------------------------------
class EngineForm(forms.ModelForm):
    """A ModelForm whose change is an engine operation, run once the form's own checks
    passed; an engine error becomes a form error. `self.answer` holds the router's answer."""

    answer: Any = None
    before: Any = None  # the row as it was in the database before the change

    # the engine's ranges (engine/validation.py), checked with the form's own: a number out
    # of range is a field error, before the router is asked
    RANGES = {"limit": (0, MAX_WIRING), "history": (0, MAX_WIRING), "credit": (-1, MAX_WIRING)}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, (low, high) in self.RANGES.items():
            field = self.fields.get(name)
            if isinstance(field, forms.IntegerField):
                field.min_value, field.max_value = low, high
                field.validators += [MinValueValidator(low), MaxValueValidator(high)]
                field.widget.attrs.update(min=low, max=high)

    def apply(self) -> Any:  # pragma: no cover - every subclass says what it does
        raise NotImplementedError

    def error_field(self, error: XumpError) -> str | None:
        """The field an engine error belongs to (None: the whole form)."""
        return None

    def _post_clean(self) -> None:
        super()._post_clean()
        if self.errors:
            return
        if self.instance.pk is not None:
            self.before = type(self.instance).objects.filter(pk=self.instance.pk).first()
        try:
            self.answer = self.apply()
        except XumpError as error:
            field = self.error_field(error)
            self.add_error(field if field in self.fields else None, str(error))


class EngineAdmin(admin.ModelAdmin):
    """Save and delete through the router (see the module doc); the form did the saving."""

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        return self._changeform_view(request, object_id, form_url, extra_context)

    def delete_view(self, request, object_id, extra_context=None):
        return self._delete_view(request, object_id, extra_context)

    def remove(self, obj: Any) -> Any:  # pragma: no cover - every subclass says how
        """Delete `obj` through the router; the answer."""
        raise NotImplementedError

    def audit_subject(self, obj: Any) -> str:
        return str(obj)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        self._remove(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for obj in list(queryset):
            self._remove(request, obj)

    def _remove(self, request: HttpRequest, obj: Any) -> bool:
        before = self.state(obj)
        subject = self.audit_subject(obj)
        try:
            self.remove(obj)
        except XumpError as error:
            request._xump_failed = True
            self.message_user(request, f"{subject} was not deleted: {error}", messages.ERROR)
            return False
        audit.record(audit.actor(request), f"{self.opts.model_name}.delete", subject, before)
        return True

    def message_user(self, request, message, level=messages.INFO, *args, **kwargs):
        # Django says "deleted successfully" after delete_model returns, failed or not
        if level == messages.SUCCESS and getattr(request, "_xump_failed", False):
            return
        super().message_user(request, message, level, *args, **kwargs)

    def state(self, obj: Any) -> dict[str, Any] | None:
        """The row's settings as JSON, for the audit log."""
        if obj is None or obj.pk is None:
            return None
        return {
            field.name: field.value_from_object(obj)
            for field in obj._meta.concrete_fields
            if field.name not in ("id", "created", "changed") and not field.is_relation
        }


class ReadOnly:
    """For an admin or inline that shows rows only: nothing is added, changed or deleted
    through it (stores are the router's, selectors have their own page, the audit log is
    never edited)."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# -- stores ----------------------------------------------------------------------------------
@admin.register(Store)
class StoreAdmin(ReadOnly, admin.ModelAdmin):
    """Stores are the router's: shown, never edited here."""

    list_display = ("name", "kind", "shown_url", "queue_count")
    list_filter = ("kind",)
    search_fields = ("name",)
    fields = ("name", "kind", "shown_url")
    readonly_fields = fields

    @admin.display(description="URL")
    def shown_url(self, store: Store) -> str:
        """The URL with any password hidden."""
        url = store.url or ""
        if "@" in url and "://" in url:
            scheme, rest = url.split("://", 1)
            credentials, host = rest.rsplit("@", 1)
            user = credentials.split(":", 1)[0]
            return f"{scheme}://{user}:***@{host}"
        return url

    @admin.display(description="queues")
    def queue_count(self, store: Store) -> int:
        return store.queues.count()


# -- queues ----------------------------------------------------------------------------------
_snapshot: contextvars.ContextVar[dict[str, dict]] = contextvars.ContextVar("snapshot")


class QueueForm(EngineForm):
    RANGES = {**EngineForm.RANGES, "max_deliveries": (1, MAX_WIRING),
              "priorities": (1, MAX_PRIORITIES)}  # fmt: skip

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in ("redelivery_backoff", "priorities"):  # empty: the default
            if name in self.fields:
                self.fields[name].required = False

    class Meta:
        model = Queue
        fields = ("name", "limit", "history", "dead_letter", "self_destruct", "journal",
                  *LIFETIME_OPTIONS)  # fmt: skip

    def apply(self) -> Any:
        data = self.cleaned_data
        settings = {
            "limit": data.get("limit"),
            "history": data.get("history") or 0,
            "dead_letter": data.get("dead_letter") or None,
            "self_destruct": bool(data.get("self_destruct")),
            "journal": bool(data.get("journal")),
            # message lifetime (SPEC §8): the engine checks the values and their ranges
            **{option: data.get(option) for option in LIFETIME_OPTIONS},
        }
        if settings["redelivery_backoff"] is None:
            settings["redelivery_backoff"] = 1.0
        if settings["priorities"] is None:
            settings["priorities"] = 1
        if self.instance.pk is None:
            return service().call("queue_create", name=data["name"], **settings)
        changes = {
            key: value
            for key, value in settings.items()
            if key in self.changed_data and key != "priorities"  # fixed at creation
        }
        if not changes:
            return None
        return service().call("queue_update", name=self.instance.name, **changes)

    def error_field(self, error: XumpError) -> str | None:
        if isinstance(error, (InvalidName, AlreadyExists)) and self.instance.pk is None:
            return "name"
        return None


class SelectorInline(ReadOnly, admin.TabularInline):
    """The queue's selectors in routing order, read-only (edit each on its own page)."""

    model = Selector
    fields = ("number", "describe", "enabled", "credit", "start")
    readonly_fields = fields
    show_change_link = True
    extra = 0

    @admin.display(description="when → do")
    def describe(self, selector: Selector) -> str:
        return selector.describe()


class ChoiceFilter(admin.SimpleListFilter):
    """A list filter whose every choice is one condition on the rows."""

    # value in the URL -> (label, condition); not `choices`: SimpleListFilter has that method
    conditions: dict[str, tuple[str, Q]]

    def lookups(self, request, model_admin):
        return [(value, label) for value, (label, _) in self.conditions.items()]

    def queryset(self, request, queryset):
        chosen = self.conditions.get(self.value())
        return queryset if chosen is None else queryset.filter(chosen[1])


class HasDeadLetter(ChoiceFilter):
    title = "dead-letter queue"
    parameter_name = "dead_letter"
    _none = Q(dead_letter__isnull=True) | Q(dead_letter="")
    conditions = {"yes": ("set", ~_none), "no": ("none", _none)}


@admin.register(Queue)
class QueueAdmin(EngineAdmin):
    form = QueueForm
    list_display = ("name", "store", "depth", "history_size", "outstanding", "limit",
                    "history_kept", "dead_letter", "self_destruct", "selector_count")  # fmt: skip
    list_filter = ("store", "self_destruct", "journal", HasDeadLetter)
    search_fields = ("name", "dead_letter")
    inlines = [SelectorInline]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        # a queue keeps its name, store and priority levels; the engine has no rename
        return ("name", "store", "priorities", "created", "changed") if obj else ()

    def changelist_view(self, request, extra_context=None):
        # one look at the router's latest stats for the whole page (no router needed)
        try:
            queues = service().snapshot()["queues"]
        except Exception as error:  # the page still lists the wiring without live figures
            queues = []
            self.message_user(request, f"live figures unavailable: {error}", messages.WARNING)
        token = _snapshot.set({q["name"]: q for q in queues})
        try:
            response = super().changelist_view(request, extra_context)
            # a TemplateResponse renders after this returns, when the snapshot would be gone
            if hasattr(response, "render"):
                response.render()
            return response
        finally:
            _snapshot.reset(token)

    def _live(self, queue: Queue, key: str) -> Any:
        found = _snapshot.get({}).get(queue.name)
        return "-" if found is None else found.get(key)

    @admin.display(description="unprocessed")
    def depth(self, queue: Queue) -> Any:
        return self._live(queue, "depth")

    @admin.display(description="in history")
    def history_size(self, queue: Queue) -> Any:
        return self._live(queue, "history_size")

    @admin.display(description="history kept", ordering="history")
    def history_kept(self, queue: Queue) -> int:
        """The setting: how many processed messages the queue keeps."""
        return queue.history

    @admin.display(description="outstanding")
    def outstanding(self, queue: Queue) -> Any:
        return self._live(queue, "outstanding")

    @admin.display(description="selectors")
    def selector_count(self, queue: Queue) -> int:
        return queue.selectors.count()

    def save_model(self, request: HttpRequest, obj: Queue, form: QueueForm, change: bool) -> None:
        # the router wrote the row (the form sent the change): read it back
        obj.pk = Queue.objects.get(name=obj.name).pk
        obj.refresh_from_db()
        if form.answer is not None:
            action = "queue.update" if change else "queue.create"
            audit.record(audit.actor(request), action, obj.name, self.state(form.before),
                         self.state(obj))  # fmt: skip

    def remove(self, obj: Queue) -> Any:
        return service().call("queue_delete", name=obj.name)


# -- selectors -------------------------------------------------------------------------------
class SelectorForm(EngineForm):
    class Meta:
        model = Selector
        fields = ("queue", "when", "match_operator", "match_pattern", "match_field",
                  "more_matches", "filter", "action", "target", "target_from", "start",
                  "credit", "enabled")  # fmt: skip
        widgets = {"filter": forms.Textarea(attrs={"rows": 3, "cols": 80})}
        help_texts = {
            "when": "match / filter: the match below, the filter, or both (match AND filter)",
            "match_field": "address, return_address, header:<name> or a header name",
            "more_matches": 'further conditions, all must hold: [["eq", "eu", "region"], ...]',
            "target_from": "instead of target: the field naming each message's target",
            "filter": "JMS / SQL-92 selector over headers, e.g. priority > 5 AND region = 'eu'",
            "target": "the queue (copy, move, bounce) or destination (deliver)",
            "start": "current, head, or a history seq",
        }

    def settings(self) -> dict[str, Any]:
        data = self.cleaned_data
        when = data.get("when") or None
        match = None
        expression = (data.get("filter") or "").strip() or None
        if when == "match" and data.get("match_operator"):
            match = {
                "operator": data["match_operator"],
                "pattern": data.get("match_pattern") or "",
                "field": (data.get("match_field") or "").strip() or "address",
            }
        more = data.get("more_matches") or []
        if not isinstance(more, list):
            more = [more]  # the engine says what is wrong with it
        start = (data.get("start") or "current").strip()
        action = data.get("action") or None
        target = (data.get("target") or "").strip() or None
        target_from = (data.get("target_from") or "").strip() or None
        return {
            "when": when,
            "match": None,
            "matches": [match, *more] if match else None,
            "filter": expression if when == "match" else None,
            "action": action,
            "target": None if action == "delete" or target_from else target,
            "target_from": None if action == "delete" else target_from,
            "start": int(start) if start.isdigit() else start,
            "credit": data.get("credit"),
            "enabled": bool(data.get("enabled")),
        }

    def apply(self) -> Any:
        settings = self.settings()
        if self.instance.pk is None:
            queue = self.cleaned_data["queue"].name
            return service().call("selector_create", queue=queue, **settings)
        old = self.instance
        queue, number = old.queue.name, old.number
        if not self.changed_data:
            return None
        # the engine combines a new match or filter with the other half of an old
        # match-and-filter WHEN; when a half goes away, clear the WHEN first
        dropped = old.when == "match" and (
            (old.match_operator and settings["matches"] is None)
            or (old.filter and settings["filter"] is None)
        )
        if dropped:
            service().call("selector_update", queue=queue, id=number, when="always",
                           enabled=False)  # fmt: skip
        try:
            return service().call("selector_update", queue=queue, id=number, **settings)
        except XumpError:
            if dropped:  # put the old WHEN back, as a failed update leaves a selector
                self._restore(queue, number, old)
            raise

    @staticmethod
    def _restore(queue: str, number: int, old: Selector) -> None:
        matches = None
        if old.match_operator:
            first = {"operator": old.match_operator, "pattern": old.match_pattern,
                     "field": old.match_field or "address"}  # fmt: skip
            matches = [first, *(old.more_matches or [])]
        try:
            service().call("selector_update", queue=queue, id=number, when="match",
                           matches=matches, filter=old.filter, enabled=old.enabled)  # fmt: skip
        except XumpError:
            pass  # the error the user sees is the update's; the selector stays disabled

    def error_field(self, error: XumpError) -> str | None:
        if not isinstance(error, InvalidSelector):
            return None
        expression = (self.cleaned_data.get("filter") or "").strip()
        if expression and self.cleaned_data.get("when") == "match":
            try:
                compile_filter(expression)
            except InvalidSelector:
                return "filter"
        if self.cleaned_data.get("match_operator") and str(error).find("pattern") >= 0:
            return "match_pattern"
        return None


@admin.register(Selector)
class SelectorAdmin(EngineAdmin):
    form = SelectorForm
    list_display = ("__str__", "queue", "number", "describe", "enabled", "credit", "start")
    list_display_links = ("__str__",)
    list_filter = ("enabled", "action", "when", "match_operator", "queue__store")
    search_fields = ("queue__name", "match_pattern", "filter", "target")
    list_select_related = ("queue",)
    autocomplete_fields = ("queue",)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        return ("queue", "number") if obj else ()

    @admin.display(description="when → do")
    def describe(self, selector: Selector) -> str:
        return selector.describe()

    def audit_subject(self, obj: Selector) -> str:
        return f"{obj.queue.name}#{obj.number}"

    def save_model(self, request, obj: Selector, form: SelectorForm, change: bool) -> None:
        # the router wrote the row (the form sent the change): read it back
        if change:
            queue, number = form.before.queue.name, form.before.number
        else:
            queue, number = form.answer["queue"], form.answer["id"]
        obj.pk = Selector.objects.get(queue__name=queue, number=number).pk
        obj.refresh_from_db()
        if form.answer is not None:
            action = "selector.update" if change else "selector.create"
            audit.record(audit.actor(request), action, f"{queue}#{number}",
                         self.state(form.before), self.state(obj))  # fmt: skip

    def remove(self, obj: Selector) -> Any:
        return service().call("selector_delete", queue=obj.queue.name, id=obj.number)


# -- patterns --------------------------------------------------------------------------------
class PatternForm(EngineForm):
    router = forms.CharField(
        max_length=200, required=False,
        help_text="router queue (housecat, parrot: default the kind's name) or, for a "
        "wolfpack, the service queue",
    )  # fmt: skip

    class Meta:
        model = Pattern
        fields = ("kind", "router", "name", "topic", "credit")
        help_texts = {
            "name": "the recipient (housecat), subscriber (parrot) or worker (wolfpack)",
            "topic": "parrot only: the topic pattern, e.g. stock.*.price",
            "credit": "wolfpack only: messages a worker holds at once (-1: unlimited)",
        }

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        kind = data.get("kind")
        if not data.get("router"):
            if kind == "wolfpack":
                self.add_error("router", "a wolfpack needs its service queue")
            elif kind:
                data["router"] = kind
                self.instance.router = kind
        if kind == "parrot" and not data.get("topic"):
            self.add_error("topic", "a parrot needs a topic pattern")
        return data

    def apply(self) -> Any:
        if self.instance.pk is not None:
            return None  # a pattern is remade, not changed: delete it and add another
        data = self.cleaned_data
        return service().call(
            "pattern_build", kind=data["kind"], name=data["name"], router=data["router"],
            topic=data.get("topic") or "", credit=data.get("credit", 1),
        )  # fmt: skip

    def error_field(self, error: XumpError) -> str | None:
        if isinstance(error, InvalidSelector):
            return "topic"
        if isinstance(error, InvalidName):
            return "name"
        return None


@admin.register(Pattern)
class PatternAdmin(EngineAdmin):
    form = PatternForm
    list_display = ("kind", "router", "name", "topic", "credit", "built_queue", "built")
    list_filter = ("kind", "router")
    search_fields = ("name", "router", "topic", "built_queue")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        built = ("built_queue", "built_selectors", "created")
        return ("kind", "router", "name", "topic", "credit", *built) if obj else ()

    @admin.display(description="selectors built")
    def built(self, pattern: Pattern) -> str:
        return ", ".join(f"{queue}#{number}" for queue, number in pattern.built_selectors)

    def save_model(self, request, obj: Pattern, form: PatternForm, change: bool) -> None:
        if change or form.answer is None:
            return
        obj.built_queue = form.answer["queue"]
        obj.built_selectors = form.answer["selectors"]
        obj.save()
        audit.record(audit.actor(request), "pattern.create", str(obj), None, self.state(obj))

    def remove(self, obj: Pattern) -> Any:
        answer = service().call(
            "pattern_remove", queue=obj.built_queue, selectors=obj.built_selectors
        )
        obj.delete()
        return answer


# -- API tokens ------------------------------------------------------------------------------
class ApiTokenForm(forms.ModelForm):
    class Meta:
        model = ApiToken
        fields = ("name", "user", "rights")
        help_texts = {
            "rights": 'queue name or glob -> rights, e.g. {"orders.*": ["publish", '
            '"consume"], "*": ["manage"]}',
        }

    def clean_rights(self) -> dict[str, list[str]]:
        rights = self.cleaned_data.get("rights")
        if not isinstance(rights, dict) or not rights:
            raise forms.ValidationError("rights must map queue names or globs to rights")
        for pattern, granted in rights.items():
            if (
                not isinstance(granted, list)
                or not granted
                or not all(right in ApiToken.RIGHTS for right in granted)
            ):
                raise forms.ValidationError(
                    f"{pattern!r}: give a list of rights among {', '.join(ApiToken.RIGHTS)}"
                )
        return rights


class IsRevoked(ChoiceFilter):
    title = "state"
    parameter_name = "state"
    conditions = {
        "live": ("live", Q(revoked__isnull=True)),
        "revoked": ("revoked", Q(revoked__isnull=False)),
    }


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    form = ApiTokenForm
    list_display = ("name", "prefix", "shown_rights", "user", "created", "last_used", "state")
    list_filter = (IsRevoked, "user")
    search_fields = ("name", "prefix")
    readonly_fields = ("prefix", "created", "last_used", "revoked")
    actions = ["revoke"]

    @admin.display(description="rights")
    def shown_rights(self, token: ApiToken) -> str:
        return "; ".join(f"{pattern}: {', '.join(rights)}" for pattern, rights in
                         token.rights.items())  # fmt: skip

    @admin.display(description="state")
    def state(self, token: ApiToken) -> str:
        if token.revoked:
            return format_html('<span style="color:#b00">revoked {}</span>',
                               f"{token.revoked:%Y-%m-%d %H:%M}")  # fmt: skip
        return "live"

    def save_model(self, request, obj: ApiToken, form: ApiTokenForm, change: bool) -> None:
        who = audit.actor(request)
        if change:
            old = ApiToken.objects.get(pk=obj.pk)
            obj.save()
            audit.record(who, "token.update", str(obj), _token_state(old), _token_state(obj))
            return
        token, secret = ApiToken.issue(obj.name, obj.rights, user=obj.user)
        obj.pk = token.pk
        obj.refresh_from_db()
        audit.record(who, "token.create", str(obj), None, _token_state(obj))
        self.message_user(
            request,
            f"The secret of token {obj.name!r} is {secret} — copy it now: it is shown only "
            "this once (programs send it as Authorization: Bearer <secret>).",
            messages.WARNING,
        )

    def delete_model(self, request, obj: ApiToken) -> None:
        audit.record(audit.actor(request), "token.delete", str(obj), _token_state(obj))
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset) -> None:
        for token in queryset:
            audit.record(audit.actor(request), "token.delete", str(token), _token_state(token))
        super().delete_queryset(request, queryset)

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset) -> None:
        now = timezone.now()
        revoked = 0
        for token in queryset.filter(revoked__isnull=True):
            token.revoked = now
            token.save(update_fields=["revoked"])
            audit.record(audit.actor(request), "token.revoke", str(token), None,
                         _token_state(token))  # fmt: skip
            revoked += 1
        self.message_user(request, f"Revoked {revoked} token(s).", messages.SUCCESS)


def _token_state(token: ApiToken) -> dict[str, Any]:
    return {
        "name": token.name,
        "prefix": token.prefix,
        "rights": token.rights,
        "user": token.user.get_username() if token.user else None,
        "revoked": token.revoked.isoformat() if token.revoked else None,
    }


# -- audit -----------------------------------------------------------------------------------
@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnly, admin.ModelAdmin):
    """The audit log: read-only."""

    list_display = ("when", "who", "action", "subject")
    list_filter = ("action", "who")
    search_fields = ("who", "action", "subject")
    date_hierarchy = "when"
    fields = ("when", "who", "action", "subject", "before", "after")
    readonly_fields = fields
