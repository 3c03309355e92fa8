"""Operator tools, run from a checkout with `python -m ops.<tool>` (not part of the Lambda asset)."""
