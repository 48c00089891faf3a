"""nsqpy.protocol."""
