"""Automation: the recipient sensor, per-model schedules, run tags, concurrency limits, transfer statuses."""
