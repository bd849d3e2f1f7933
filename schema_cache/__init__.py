"""Protocol decoders and their schema caches: raw Kafka messages in, typed events out.

The only package that knows wire formats. See `schema_cache.decoder` for the
interface and the protocol registry.
"""
