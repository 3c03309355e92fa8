"""onceflow: serverless pipelines on AWS whose effects are exactly-once while AWS delivers at-least-once.

The public API is `onceflow.constructs`. `onceflow.infra` (the CDK code) and `onceflow.runtime`
(the Lambda code asset) are the repository's infra/ and runtime/ folders; in a source checkout
they are linked here, and the wheel carries them as these subpackages.
"""

# The one place the version is written: the wheel's metadata reads it (pyproject.toml, dynamic version).
__version__ = "0.1.0"
