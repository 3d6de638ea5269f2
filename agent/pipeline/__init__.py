"""One call's pipecat pipeline: its processors, the model clients with their pooled sessions
and fallbacks, VAD and end of turn, what the caller heard, the recording tap."""
