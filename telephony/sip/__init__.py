"""Our SIP user agent (RFC 3261 over UDP): messages, SDP, transactions, dialogs, digest auth,
session timers, and each call's media as a pipecat transport (``media``).

The entry point is :class:`telephony.sip.ua.SipEndpoint`; each call it carries is a
:class:`telephony.sip.call.SipCall`, a :class:`telephony.line.PhoneLine`.
"""
