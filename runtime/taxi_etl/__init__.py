"""Taxi ETL saga: validate, transform and store NYC yellow-taxi trip rows."""
