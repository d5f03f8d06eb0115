"""The operator console: server-rendered pages with htmx (templates under templates/console/,
scripts and vendored libraries under static/)."""
