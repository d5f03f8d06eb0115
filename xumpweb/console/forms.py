"""The console's forms. They check shapes (numbers, required fields); names, patterns and
expressions are checked by the engine when the operation runs, and its error is shown."""

from __future__ import annotations

from typing import Any

from django import forms

from engine.selectors import MAX_CONDITIONS
from engine.validation import MAX_PRIORITIES, MAX_SECONDS, MAX_SEQ, MAX_WIRING
from xumpweb.console.common import parse_header_lines
from xumpweb.wiring.models import ApiToken

WHEN_CHOICES = [
    ("match", "match the address or a header"),
    ("filter", "filter expression over headers"),
    ("always", "always"),
    ("default", "default (when no other selector matched)"),
    ("overflow", "overflow (a message arriving at a full queue)"),
]
OPERATOR_CHOICES = [
    ("topic", "topic (a.*.c, #)"),
    ("eq", "equals"),
    ("prefix", "prefix"),
    ("regex", "regular expression (full match)"),
]
ACTION_CHOICES = [
    ("copy", "COPY to queue"),
    ("move", "MOVE to queue"),
    ("deliver", "DELIVER to destination"),
    ("bounce", "BOUNCE to queue"),
    ("delete", "DELETE"),
]


class Form(forms.Form):
    """Labels without Django's trailing colon (the layout sets them apart)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)


def optional_seconds(help_text: str) -> forms.FloatField:
    """A number of seconds that may be left empty (no such wait or expiry)."""
    return forms.FloatField(required=False, min_value=0, max_value=MAX_SECONDS, help_text=help_text)


class QueueSettingsForm(Form):
    limit = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_WIRING,
        help_text="most unprocessed messages; empty: unbounded",
    )  # fmt: skip
    history = forms.IntegerField(
        min_value=0, max_value=MAX_WIRING, initial=0, help_text="processed messages kept"
    )
    dead_letter = forms.CharField(
        required=False, max_length=200, help_text="queue for unroutable messages; empty: none"
    )
    self_destruct = forms.BooleanField(
        required=False, help_text="delete the queue when its last selector is deleted"
    )
    journal = forms.BooleanField(
        required=False, initial=True, help_text="record its events for the archive (Analytics)"
    )
    # message lifetime (SPEC §8, docs/lifetime.md); the engine checks them together
    max_deliveries = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_WIRING,
        help_text="deliveries before a message is dead-lettered (delivery-limit); empty: no limit",
    )  # fmt: skip
    redelivery_delay = optional_seconds(
        "seconds a rejected or timed-out message waits; empty: none"
    )
    redelivery_backoff = forms.FloatField(
        required=False, min_value=1, max_value=1000, initial=1.0,
        help_text="the wait's multiplier per delivery (1: constant)",
    )  # fmt: skip
    redelivery_delay_max = optional_seconds("the wait's cap in seconds; empty: none")
    ttl = optional_seconds("seconds before an unprocessed message expires; empty: never")

    def engine_settings(self) -> dict[str, Any]:
        data = dict(self.cleaned_data)
        data["dead_letter"] = data.get("dead_letter") or None
        if data.get("redelivery_backoff") is None:
            data["redelivery_backoff"] = 1.0
        if "priorities" in data and data["priorities"] is None:
            data["priorities"] = 1
        return data


class QueueCreateForm(QueueSettingsForm):
    name = forms.CharField(max_length=200)
    priorities = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_PRIORITIES, initial=1,
        help_text="priority levels (header priority, highest first); fixed at creation",
    )  # fmt: skip
    field_order = ["name", "limit", "history", "dead_letter", "self_destruct", "journal"]


class PublishForm(Form):
    address = forms.CharField(required=False, max_length=1000)
    headers = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="one per line, name: value (numbers and true/false are typed)",
    )
    body = forms.CharField(required=False, strip=False, widget=forms.Textarea(attrs={"rows": 4}))
    return_address = forms.CharField(required=False, max_length=1000)

    def clean_headers(self) -> dict[str, Any]:
        try:
            return parse_header_lines(self.cleaned_data.get("headers") or "")
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None


class SelectorForm(Form):
    when = forms.ChoiceField(label="WHEN", choices=WHEN_CHOICES, widget=forms.RadioSelect)
    operator = forms.ChoiceField(label="match operator", choices=OPERATOR_CHOICES, required=False)
    pattern = forms.CharField(label="pattern", required=False, max_length=1000)
    field = forms.CharField(
        label="field", required=False, initial="address", max_length=210,
        help_text="address, return_address, header:<name> or a header name",
    )  # fmt: skip
    filter = forms.CharField(
        label="filter expression",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false"}),
        help_text="e.g. priority > 5 AND region IN ('eu', 'us'); with a match, both must hold",
    )
    action = forms.ChoiceField(label="DO", choices=ACTION_CHOICES)
    target = forms.CharField(
        label="target", required=False, max_length=200, help_text="queue or destination"
    )
    target_from = forms.CharField(
        label="or per message, from", required=False, max_length=210,
        help_text="instead of a fixed target: the field naming each message's (e.g. header:to)",
    )  # fmt: skip
    credit = forms.IntegerField(
        label="credit", initial=-1, min_value=-1, max_value=MAX_WIRING, help_text="-1: unlimited"
    )
    start = forms.CharField(
        label="start", initial="current", max_length=30,
        help_text="current, head, or a seq to replay history from",
    )  # fmt: skip
    enabled = forms.BooleanField(label="enabled", required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # the MATCH conditions after the first (SPEC §12), as rows of the builder
        if self.is_bound:
            getlist = self.data.getlist
            self.more_rows = [
                {"operator": operator, "pattern": pattern, "field": field.strip() or "address"}
                for operator, pattern, field in zip(
                    getlist("more_operator"),
                    getlist("more_pattern"),
                    getlist("more_field"),
                    strict=False,
                )
            ][:MAX_CONDITIONS]
        else:
            self.more_rows = list((self.initial or {}).get("more") or [])
        self.operator_choices = OPERATOR_CHOICES

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        when = data.get("when")
        for number, row in enumerate(self.more_rows, 2):
            if row["operator"] not in dict(OPERATOR_CHOICES):
                self.add_error(None, f"condition {number}: choose an operator")
            elif not row["pattern"] and row["operator"] != "eq":
                self.add_error(None, f"condition {number} needs a pattern")
        if when == "match" and not data.get("pattern") and data.get("operator") != "eq":
            self.add_error("pattern", "a match needs a pattern")
        if when == "filter" and not (data.get("filter") or "").strip():
            self.add_error("filter", "a filter selector needs an expression")
        target_from = (data.get("target_from") or "").strip()
        if (
            data.get("action") not in (None, "delete")
            and not data.get("target")
            and not target_from
        ):
            self.add_error("target", "this action needs a target (or a field to take it from)")
        if data.get("target") and target_from:
            self.add_error("target_from", "give a target or a field to take it from, not both")
        start = (data.get("start") or "current").strip()
        if start not in ("current", "head"):
            try:
                start = int(start)
            except ValueError:
                self.add_error("start", "current, head or a seq number")
            else:
                if not 1 <= start <= MAX_SEQ:
                    self.add_error("start", f"a seq is from 1 to {MAX_SEQ}")
        data["start"] = start
        return data

    def engine_settings(self) -> dict[str, Any]:
        """The arguments of selector_create / selector_update."""
        data = self.cleaned_data
        settings: dict[str, Any] = {"when": data["when"], "action": data["action"]}
        expression = (data.get("filter") or "").strip() or None
        if data["when"] == "match":
            first = {
                "operator": data.get("operator") or "topic",
                "pattern": data.get("pattern") or "",
                "field": (data.get("field") or "").strip() or "address",
            }
            settings["matches"] = [first, *self.more_rows]
            if expression:
                settings["filter"] = expression
        elif data["when"] == "filter":
            settings["filter"] = expression
        target_from = (data.get("target_from") or "").strip()
        if data["action"] != "delete" and target_from:
            settings["target_from"] = target_from
        elif data["action"] != "delete":
            settings["target"] = data["target"]
        settings["credit"] = data["credit"]
        settings["start"] = data["start"]
        settings["enabled"] = bool(data.get("enabled"))
        return settings

    @classmethod
    def initial_from(cls, selector: dict[str, Any]) -> dict[str, Any]:
        match = selector.get("match") or {}
        when = selector.get("when") or "match"
        return {
            "when": when,
            "operator": match.get("operator") or "topic",
            "pattern": match.get("pattern") or "",
            "field": match.get("field") or "address",
            "filter": selector.get("filter") or "",
            "action": selector.get("action") or "copy",
            "target": selector.get("target") or "",
            "target_from": selector.get("target_from") or "",
            "more": (selector.get("matches") or [])[1:],
            "credit": selector.get("credit", -1),
            "start": selector.get("start", "current"),
            "enabled": selector.get("enabled", False),
        }


class PatternForm(Form):
    name = forms.CharField(max_length=200)
    router = forms.CharField(max_length=200)
    topic = forms.CharField(required=False, max_length=1000)
    credit = forms.IntegerField(required=False, initial=1, min_value=-1, max_value=MAX_WIRING)

    def __init__(self, kind: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kind = kind
        labels = {
            "housecat": ("recipient", "router queue"),
            "parrot": ("subscriber", "router queue"),
            "wolfpack": ("worker", "service queue"),
        }[kind]
        self.fields["name"].label, self.fields["router"].label = labels
        self.fields["router"].initial = {"wolfpack": "jobs"}.get(kind, kind)
        if kind == "parrot":
            self.fields["topic"].required = True
            self.fields["topic"].label = "topic pattern"
            self.fields["topic"].help_text = "e.g. stock.*.price or news.#"
        else:
            del self.fields["topic"]
        if kind == "wolfpack":
            self.fields["credit"].help_text = "messages a worker holds at once (-1: unlimited)"
        else:
            del self.fields["credit"]

    def build_arguments(self) -> dict[str, Any]:
        data = self.cleaned_data
        arguments = {"kind": self.kind, "name": data["name"], "router": data["router"]}
        if self.kind == "parrot":
            arguments["topic"] = data["topic"]
        if self.kind == "wolfpack":
            arguments["credit"] = 1 if data.get("credit") is None else data["credit"]
        return arguments


class TokenForm(Form):
    name = forms.CharField(max_length=200)
    rights = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        initial="*: publish, consume",
        help_text="one per line: queue or glob: rights (read, publish, consume, manage, "
        "metrics), "
        "only rights you hold",
    )

    def clean_rights(self) -> dict[str, list[str]]:
        rights: dict[str, list[str]] = {}
        for number, line in enumerate(self.cleaned_data["rights"].splitlines(), 1):
            if not line.strip():
                continue
            pattern, colon, granted = line.rpartition(":")
            pattern = pattern.strip()
            if not colon or not pattern:
                raise forms.ValidationError(f"line {number}: write `queue-or-glob: rights`")
            names = [g.strip() for g in granted.split(",") if g.strip()]
            unknown = [g for g in names if g not in ApiToken.RIGHTS]
            if unknown or not names:
                raise forms.ValidationError(
                    f"line {number}: rights are {', '.join(ApiToken.RIGHTS)}, not {unknown}"
                )
            rights.setdefault(pattern, [])
            rights[pattern] += [g for g in names if g not in rights[pattern]]
        if not rights:
            raise forms.ValidationError("give the token at least one right")
        problem = ApiToken.patterns_problem(rights)
        if problem is not None:
            raise forms.ValidationError(problem)
        return rights
