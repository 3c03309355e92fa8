"""The taxi ETL saga slice: its construct, monitoring, cdk-nag acknowledgements and stack."""
