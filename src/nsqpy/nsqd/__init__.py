"""nsqpy.nsqd."""
