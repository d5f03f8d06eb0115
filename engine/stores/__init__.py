"""Storage back-ends for per-message runtime state (SPEC §4)."""
