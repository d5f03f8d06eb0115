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
        existing = list(
            users.objects.filter(is_superuser=True).values_list("username", flat=True)[:3]
        )
        if existing:
            names = ", ".join(repr(name) for name in existing)
            self.stdout.write(
                f"Login: {names} with the password set earlier "
                "(forgotten? python manage.py changepassword <login>)"
            )
            return
        given = os.environ.get("XUMP_ADMIN_PASSWORD")
        password = given or secrets.token_urlsafe(12)
        users.objects.create_superuser("admin", "", password)
        shown = "from XUMP_ADMIN_PASSWORD" if given else f"{password}  (shown this once)"
        self.stdout.write(f"Created the admin login: user 'admin', password {shown}")
