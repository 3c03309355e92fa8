"""The event-log slice: its construct, monitoring, cdk-nag acknowledgements and stack."""
