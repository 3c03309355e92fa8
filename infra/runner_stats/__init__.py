"""The runner-stats slice: its construct, monitoring, cdk-nag acknowledgements and stack."""
