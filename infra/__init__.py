"""onceflow infrastructure (CDK only; never imports runtime/)."""
