"""The runner-stats pipeline's own exceptions, in one place."""

from __future__ import annotations


class AmbiguousSequence(Exception):
    """A sequence below the forgotten closed ranges, and no archive to tell applied from closed."""
