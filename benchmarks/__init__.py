"""Benchmarks: baselines that the pipeline is measured against. Nothing here is deployed."""
