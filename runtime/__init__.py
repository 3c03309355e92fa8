"""onceflow runtime: the one Python package deployed as the Lambda code asset."""
