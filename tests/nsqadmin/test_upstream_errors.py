"""What nsqadmin reads of an nsqd's or nsqlookupd's error body (``_error_fields``): the
code its clients read (``message``) and the reason beside it (``detail``), bounded."""

from __future__ import annotations

from nsqpy.nsqadmin.upstream import _error_fields


def test_the_code_and_its_detail_are_read_and_bounded() -> None:
    why = "partition_num 4 * replicator 2 > 3 live nodes " * 20
    body = b'{"message": "E_X", "detail": "%s"}' % why.encode()
    assert _error_fields(body) == ("E_X", why[:500])
    assert _error_fields(b'{"message": "E_X"}') == ("E_X", "")
    assert _error_fields(b'{"message": "E_X", "detail": ["not", "text"]}') == ("E_X", "")
    assert _error_fields(b'{"status_txt": "E_OLD"}') == ("E_OLD", "")  # (NSQ's old form)
    assert _error_fields(b"INVALID_REQUEST") == ("INVALID_REQUEST", "")
    assert _error_fields(b"x" * 300) == ("", ""), "a long text body is no code"
    assert _error_fields(b'["E_X"]') == ("", "")
