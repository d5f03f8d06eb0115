# Several conditions per selector and targets from the envelope (SPEC §12)

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('wiring', '0006_queue_mailbox'),
    ]

    operations = [
        migrations.AddField(
            model_name='selector',
            name='more_matches',
            field=models.JSONField(blank=True, default=list, help_text='match conditions after the first: [[operator, pattern, field], ...]; all must hold'),
        ),
        migrations.AddField(
            model_name='selector',
            name='target_from',
            field=models.CharField(blank=True, help_text="the field naming each message's target (instead of target)", max_length=210, null=True),
        ),
    ]
