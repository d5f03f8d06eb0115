"""Settings for the test suite: the service's own settings (everything still comes from the
environment the fixtures give, tests/web/conftest.py) with what only tests want on top.

Passwords are hashed with MD5 so that logging in (every browser and session test does)
costs microseconds instead of PBKDF2's ~300 ms; never use this module outside tests.
"""

from xumpweb.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
