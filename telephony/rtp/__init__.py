"""A SIP call's media: RTP sessions (``session``), the per-worker sender process that keeps
every call's 20 ms schedule (``sender``, ``pacer``), G.711 and RFC 4733 DTMF.

No names are re-exported here: the sender runs as ``python -m telephony.rtp.sender`` in a
process of its own, which should import no more than it needs.
"""
