"""nsqpy.tools."""
