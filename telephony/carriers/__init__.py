"""Calls that reach the agent through someone else's media: a browser over WebRTC
(``webrtc``), Twilio's and Telnyx's media streams over a websocket (``media_stream``, with
their webhook ``signatures``) and LiveKit rooms (``livekit``). Each is a phone line
(``telephony.line``) configured by a small options object filled in at the edge."""
