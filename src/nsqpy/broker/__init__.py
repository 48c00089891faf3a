"""nsqpy.broker."""
