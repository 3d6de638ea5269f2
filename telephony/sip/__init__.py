"""Our SIP user agent (RFC 3261 over UDP): messages, SDP, transactions, dialogs, digest auth.

The entry point is :class:`telephony.sip.ua.SipEndpoint`; each call it carries is a
:class:`telephony.sip.ua.SipCall`, a :class:`telephony.line.PhoneLine`.
"""
