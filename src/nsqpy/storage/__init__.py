"""nsqpy.storage."""
