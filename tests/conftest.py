"""The suite loads nsqpy's test kit as a pytest plugin (``nsqpy.testing.pytest_plugin``): the
shared fixtures (``clock``, ``nsqd``, ``nsqd_servers``, ``data_path``, ``start_nsqd``) and
the teardown after every test that closes the connections it left open. The kit's own
``assert`` statements (``subscriber``, ``publish``) are rewritten to show their values."""

import pytest

pytest.register_assert_rewrite("nsqpy.testing")

pytest_plugins = ["nsqpy.testing.pytest_plugin"]
