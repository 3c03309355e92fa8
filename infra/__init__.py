"""onceflow infrastructure (CDK). From runtime/ it imports only the contract modules
(runtime/<pipeline>/contract.py), which hold constants and import nothing."""
