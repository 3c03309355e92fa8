"""The embedded cloud: moto and the corrections to it, the event source mappings and stream
readers Lambda would run, the Lambda context, fault injection at the botocore level, the capacity
meter, and the resources built from a synthesized template. Nothing here knows a pipeline; the
per-pipeline worlds and demos in devtools/ are built on it."""
