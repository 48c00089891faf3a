"""nsqpy: NSQ, the realtime distributed messaging platform, written in Python.

Wire-compatible with NSQ v1.3.0 clients and tools; every message is kept in a durable
topic log and channels are cursors over it.
"""

import sys

__version__ = "0.1.0"

# The NSQ version nsqpy speaks and reports on the wire (/info, IDENTIFY, /stats):
# clients and nsqadmin compare it as semver, so it names the protocol level, not our release.
NSQ_VERSION = "1.3.0"


def version_line(program: str) -> str:
    """What ``--version`` prints for every daemon and tool, NSQ's shape with nsqpy's build:
    ``nsqd v1.3.0 (nsqpy 0.1.0, python 3.11.2)``."""
    return f"{program} v{NSQ_VERSION} (nsqpy {__version__}, python {sys.version.split()[0]})"
