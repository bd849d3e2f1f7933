"""TiCDC's canal-json protocol."""
