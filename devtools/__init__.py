"""Developer tools: a seeded workload generator, an independent reference model and a
DynamoDB capacity meter for moto. Nothing here is deployed."""
