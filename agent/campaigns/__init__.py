"""Outbound work: the pre-dial gate, the dialer, portfolio and campaign files."""
