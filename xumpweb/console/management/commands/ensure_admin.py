"""Create the first admin user if there is none (used by `make run`)."""

from __future__ import annotations

import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create user 'admin' when no superuser exists; password from XUMP_ADMIN_PASSWORD."

    def handle(self, *args: object, **options: object) -> None:
        users = get_user_model()
        if users.objects.filter(is_superuser=True).exists():
            self.stdout.write("Admin user exists; log in with your password.")
            return
        password = os.environ.get("XUMP_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
        users.objects.create_superuser("admin", "", password)
        shown = "from XUMP_ADMIN_PASSWORD" if os.environ.get("XUMP_ADMIN_PASSWORD") else password
        self.stdout.write(f"Created admin user: login 'admin', password {shown} (shown once)")
