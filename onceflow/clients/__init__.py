"""Clients of the deployed onceflow APIs (the optional extra `onceflow[clients]`, which brings boto3).

`onceflow.clients.event_log`: the event-log API (Pipeline 2), as a library and a CLI
(`python -m onceflow.clients.event_log --help`).
"""
