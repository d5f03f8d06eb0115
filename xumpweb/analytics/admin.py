from django.contrib import admin

from xumpweb.analytics.models import AnalyticsRun


@admin.register(AnalyticsRun)
class AnalyticsRunAdmin(admin.ModelAdmin):
    """Read-only: runs are started from the console or the command and written by tasks."""

    list_display = ("id", "kind", "status", "progress", "created", "finished", "created_by")
    list_filter = ("kind", "status")
    readonly_fields = [f.name for f in AnalyticsRun._meta.fields]

    def has_add_permission(self, request) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False
