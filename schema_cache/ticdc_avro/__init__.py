"""TiCDC's `avro` protocol: Confluent wire format with schemas in a Schema Registry."""
