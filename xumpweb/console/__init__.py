"""The operator console (HTMX views). For now: the home page and admin bootstrap."""
