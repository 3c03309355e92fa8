"""Stacks: each composes constructs and nothing else."""
