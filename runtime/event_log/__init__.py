"""Pipeline 2: an event-sourced spreadsheet log with exactly-once snapshots."""
