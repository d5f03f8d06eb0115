"""The Django admin over roles: queue grants (the operator role's scope), edited on their
own, on a user's page or on a group's; and users, whose role changes (groups, staff,
superuser, active) are audited. xumpweb/access.py says what each role may do."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.http import HttpRequest

from xumpweb.wiring import audit
from xumpweb.wiring.models import ApiToken, QueueGrant


class QueueGrantForm(forms.ModelForm):
    rights = forms.MultipleChoiceField(
        choices=[(right, right) for right in ApiToken.RIGHTS],
        widget=forms.CheckboxSelectMultiple,
        help_text="consume and manage include read",
    )

    class Meta:
        model = QueueGrant
        fields = ("user", "group", "queues", "rights")

    def clean_queues(self) -> str:
        queues = self.cleaned_data["queues"].strip()
        if not queues or any(c.isspace() for c in queues):
            raise forms.ValidationError("a queue name or glob, without spaces")
        return queues

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        holders = [cleaned.get("user"), cleaned.get("group")]
        if "user" in self.fields and "group" in self.fields and sum(map(bool, holders)) != 1:
            raise forms.ValidationError("grant to one user or one group")
        return cleaned


def grant_state(grant: QueueGrant) -> dict[str, Any]:
    return {
        "user": grant.user.get_username() if grant.user else None,
        "group": grant.group.name if grant.group else None,
        "queues": grant.queues,
        "rights": grant.rights,
    }


@admin.register(QueueGrant)
class QueueGrantAdmin(admin.ModelAdmin):
    form = QueueGrantForm
    list_display = ("queues", "shown_rights", "user", "group")
    list_filter = ("group",)
    search_fields = ("queues", "user__username", "group__name")

    @admin.display(description="rights")
    def shown_rights(self, grant: QueueGrant) -> str:
        return ", ".join(grant.rights)

    def save_model(self, request, obj: QueueGrant, form: QueueGrantForm, change: bool) -> None:
        before = grant_state(QueueGrant.objects.get(pk=obj.pk)) if change else None
        super().save_model(request, obj, form, change)
        audit.record(audit.actor(request), "grant.update" if change else "grant.create",
                     str(obj), before, grant_state(obj))  # fmt: skip

    def delete_model(self, request: HttpRequest, obj: QueueGrant) -> None:
        audit.record(audit.actor(request), "grant.delete", str(obj), grant_state(obj))
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for grant in queryset:
            audit.record(audit.actor(request), "grant.delete", str(grant), grant_state(grant))
        super().delete_queryset(request, queryset)


class QueueGrantInline(admin.TabularInline):
    model = QueueGrant
    form = QueueGrantForm
    extra = 0
    fields = ("queues", "rights")
    verbose_name = "queue grant (counts for the operator role)"


def role_state(user: Any) -> dict[str, Any]:
    return {
        "groups": sorted(user.groups.values_list("name", flat=True)),
        "is_staff": user.is_staff,
        "is_superuser": user.is_superuser,
        "is_active": user.is_active,
        "grants": [grant_state(g) for g in user.queue_grants.all()],
    }


User = get_user_model()
admin.site.unregister(User)
admin.site.unregister(Group)


@admin.register(User)
class XumpUserAdmin(UserAdmin):
    """Django's user admin, with the user's queue grants and an audit entry whenever the
    user's role changes."""

    inlines = [QueueGrantInline]

    def save_model(self, request, obj, form, change) -> None:
        old = User.objects.filter(pk=obj.pk).first() if change else None
        form._xump_before = role_state(old) if old is not None else None
        super().save_model(request, obj, form, change)

    def save_related(self, request, form, formsets, change) -> None:
        super().save_related(request, form, formsets, change)
        before = getattr(form, "_xump_before", None)
        after = role_state(form.instance)
        if before != after:
            audit.record(audit.actor(request), "user.role", form.instance.get_username(),
                         before, after)  # fmt: skip

    def delete_model(self, request, obj) -> None:
        audit.record(audit.actor(request), "user.delete", obj.get_username(), role_state(obj))
        super().delete_model(request, obj)


@admin.register(Group)
class XumpGroupAdmin(GroupAdmin):
    """Django's group admin, with the group's queue grants (changes audited)."""

    inlines = [QueueGrantInline]

    def save_related(self, request, form, formsets, change) -> None:
        group = form.instance
        before = self._state(group) if change else None
        super().save_related(request, form, formsets, change)
        after = self._state(group)
        if before != after:
            audit.record(audit.actor(request), "group.change", group.name, before, after)

    @staticmethod
    def _state(group: Group) -> dict[str, Any]:
        return {
            "permissions": sorted(group.permissions.values_list("codename", flat=True)),
            "grants": [grant_state(g) for g in group.queue_grants.all()],
        }
