"""nsqadmin: the web UI and JSON API over the HTTP APIs of nsqlookupd and nsqd (SPEC 4)."""
