"""Analytics: the archive export and the Spark pipeline's jobs, launched and shown in the
console (AnalyticsRun)."""
