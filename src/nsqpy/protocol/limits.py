"""Server limits that parsing and IDENTIFY validation depend on (SPEC 1.10).

Owns the ``Limits`` value object and the fixed protocol constants. Imports only the standard
library; it must not import anything from nsqpy above ``errors``.
"""

from __future__ import annotations

from dataclasses import dataclass

# nsqd reads command lines with a 16 KiB bufio.Reader: a line (with its "\n") must fit in it.
MAX_LINE_LENGTH = 16384
# ClientTimeout is fixed at 60 s in nsqd; the default heartbeat interval is half of it.
CLIENT_TIMEOUT_MS = 60000
DEFAULT_OUTPUT_BUFFER_SIZE = 16384
# The largest IDENTIFY or AUTH body nsqpy takes from a client that has yet to AUTH (when
# AUTH is required): IDENTIFY's fields fit in a few hundred bytes and a secret travels in the
# auth server's URL, while decoding megabytes of JSON (or URL-encoding a huge secret) would
# hold the event loop for everyone on behalf of a client nobody has vouched for.
PRE_AUTH_BODY_SIZE = 16384
# The largest IDENTIFY body nsqpy takes at all (NSQ allows --max-body-size, 5 MB): real ones
# are a few hundred bytes, and parsing megabytes of JSON on the event loop stalls every
# client for most of a second (measured: 0.76 s for 4.8 MB of nested JSON).
MAX_IDENTIFY_BODY_SIZE = 65536
DEFAULT_DEFLATE_LEVEL = 6


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits of one nsqd; the defaults are nsqd v1.3.0's flag defaults."""

    max_msg_size: int = 1048576
    max_body_size: int = 5242880
    max_rdy_count: int = 2500
    max_req_timeout_ms: int = 3600000
    max_msg_timeout_ms: int = 900000
    msg_timeout_ms: int = 60000
    max_heartbeat_interval_ms: int = 60000
    max_output_buffer_size: int = 65536
    min_output_buffer_timeout_ms: int = 25
    max_output_buffer_timeout_ms: int = 30000
    output_buffer_timeout_ms: int = 250
    max_deflate_level: int = 6
    snappy: bool = True
    deflate: bool = True
    tls_available: bool = False
    auth_required: bool = False
    client_timeout_ms: int = CLIENT_TIMEOUT_MS

    @property
    def max_mpub_count(self) -> int:
        """The most messages one MPUB may carry: 4 bytes of count, then at least 5 per message."""
        return (self.max_body_size - 4) // 5


DEFAULT_LIMITS = Limits()
