"""TiCDC's debezium protocol (JSON, with or without inline schemas)."""
