"""The three roles as Django groups (xumpweb/access.py says what each may do):
viewer (reads everything), operator (viewer + the queue grants of the user or group),
admin (everything, and the Django admin's model permissions for users, groups, wiring,
tokens and analytics runs). Admins change who is in which group in the Django admin."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

ROLES = {
    "viewer": ["wiring.read_everything"],
    "operator": ["wiring.read_everything", "wiring.operate_queues"],
    "admin": ["wiring.read_everything", "wiring.operate_queues", "wiring.administer"],
}
ADMIN_MODELS = ["auth.user", "auth.group", "wiring.store", "wiring.queue", "wiring.selector",
                "wiring.pattern", "wiring.apitoken", "wiring.queuegrant", "wiring.auditevent",
                "analytics.analyticsrun"]  # fmt: skip


def make_groups(apps, schema_editor):
    for config in apps.get_app_configs():  # permissions exist only after migrate otherwise
        config.models_module = True
        create_permissions(config, apps=apps, verbosity=0)
        config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for role, names in ROLES.items():
        group, _ = Group.objects.get_or_create(name=role)
        for name in names:
            app, codename = name.split(".")
            group.permissions.add(
                Permission.objects.get(content_type__app_label=app, codename=codename)
            )
    admin = Group.objects.get(name="admin")
    for label in ADMIN_MODELS:
        app, model = label.split(".")
        admin.permissions.add(
            *Permission.objects.filter(content_type__app_label=app, content_type__model=model)
        )


def remove_groups(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=list(ROLES)).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("wiring", "0003_roles"),
        ("analytics", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(make_groups, remove_groups)]
