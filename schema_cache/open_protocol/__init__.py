"""TiCDC's Open Protocol."""
