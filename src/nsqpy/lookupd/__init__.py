"""nsqpy.lookupd."""
