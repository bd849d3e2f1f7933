"""The Spark engine (`run.engine = "spark"`), all of it: Kafka read by Spark (`kafka_frame`), decoded on the
executors (`executor_decoding`), staged in a Delta table (`staging`) and released as runs of one table
(`runs`), the intake the batch loop takes (`intake`). The loop, the applier and the writer are the driver
engine's."""
