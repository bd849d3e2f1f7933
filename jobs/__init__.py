"""Config, CLI, run modes: the only place Kafka, Spark and the core meet."""
