"""Building blocks shared by every pipeline: observability, settings, DynamoDB helpers, primitives."""
