"""Runner stats: Kinesis device messages folded into exactly-once per-run statistics."""
