"""The analytics forms: what to run (report or backtest over a time range and queues, a
WHEN for a backtest) and where to replay. The pattern and the filter are checked with the
engine's own parser, so a mistake shows with its column before anything starts."""

from __future__ import annotations

from typing import Any

from django import forms

from engine.errors import InvalidSelector
from engine.filters import compile_filter
from engine.matching import check_pattern
from xumpweb.console.forms import OPERATOR_CHOICES, Form
from xumpweb.console.queues import column_error

KIND_CHOICES = [("report", "traffic report"), ("backtest", "selector backtest")]
WHEN_WIDGET = forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M")


class RunForm(Form):
    kind = forms.ChoiceField(label="job", choices=KIND_CHOICES, widget=forms.RadioSelect)
    since = forms.DateTimeField(
        label="from (UTC)", required=False, widget=WHEN_WIDGET, help_text="empty: the beginning"
    )
    until = forms.DateTimeField(
        label="until (UTC)", required=False, widget=WHEN_WIDGET, help_text="empty: now"
    )
    queues = forms.MultipleChoiceField(
        label="queues", required=False, widget=forms.CheckboxSelectMultiple,
        help_text="none ticked: every archived queue",
    )  # fmt: skip
    match_operator = forms.ChoiceField(
        label="match operator", required=False,
        choices=[("", "no match (filter only)"), *OPERATOR_CHOICES],
    )  # fmt: skip
    pattern = forms.CharField(
        label="address pattern", required=False, max_length=1000,
        widget=forms.TextInput(attrs={"class": "mono", "spellcheck": "false"}),
    )  # fmt: skip
    filter = forms.CharField(
        label="filter expression", required=False, max_length=5000,
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false", "class": "mono"}),
        help_text="e.g. priority > 5 AND region IN ('eu', 'us'); with a match, both must hold",
    )  # fmt: skip

    def __init__(self, *args: Any, queues: list[str] = (), **kwargs: Any) -> None:  # type: ignore[assignment]
        super().__init__(*args, **kwargs)
        self.fields["queues"].choices = [(name, name) for name in queues]
        self.expression_errors: dict[str, dict[str, Any]] = {}  # field -> column_error

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and since >= until:
            self.add_error("until", "must be after the start")
        operator = data.get("match_operator") or ""
        pattern = data.get("pattern") or ""
        expression = (data.get("filter") or "").strip()
        if data.get("kind") == "backtest":
            if not operator and not expression:
                self.add_error(None, "a backtest needs a match (operator and pattern), a filter, "
                               "or both")  # fmt: skip
            if operator:
                if not pattern and operator != "eq":
                    self.add_error("pattern", "a match needs a pattern")
                else:
                    self._check("pattern", pattern, lambda: check_pattern(operator, pattern))
            elif pattern:
                self.add_error("match_operator", "choose how the pattern matches")
            if expression:
                self._check("filter", expression, lambda: compile_filter(expression))
        return data

    def _check(self, name: str, text: str, check: Any) -> None:
        try:
            check()
        except InvalidSelector as invalid:
            found = column_error(text, invalid)
            self.expression_errors[name] = found
            where = f" (column {found['column']})" if found.get("column") else ""
            self.add_error(name, f"{invalid}{where}")

    def parameters(self) -> dict[str, Any]:
        """The run's parameters as JSON (times as seconds since the epoch)."""
        data = self.cleaned_data
        found: dict[str, Any] = {
            "since": data["since"].timestamp() if data.get("since") else None,
            "until": data["until"].timestamp() if data.get("until") else None,
            "queues": list(data.get("queues") or []),
        }
        if data["kind"] == "backtest":
            operator = data.get("match_operator") or None
            found["match_operator"] = operator
            found["pattern"] = data.get("pattern") if operator else None
            found["filter"] = (data.get("filter") or "").strip() or None
        return found


class ReplayForm(Form):
    queue = forms.ChoiceField(label="target queue", help_text="the selected messages go here")
    confirm = forms.BooleanField(
        label="I understand every selected message is published again into this queue",
        required=True,
    )

    def __init__(self, *args: Any, queues: list[str] = (), **kwargs: Any) -> None:  # type: ignore[assignment]
        super().__init__(*args, **kwargs)
        self.fields["queue"].choices = [("", "choose a queue"), *((q, q) for q in queues)]
