"""TiCDC Simple protocol."""
