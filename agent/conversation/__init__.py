"""The collection conversation as text: the policy that decides, what the caller's words mean,
the output guard, the prompts and the caller scripts.

Re-exported here are the shared types (the account and its terms, the policy's replies
and events), which import nothing but the standard library, so that the pipeline, the
campaigns and the store read them without loading the policy. The policy, the intents
and the guard (which brings pipecat's sentence splitter) are imported from their
modules, so that importing one small module never loads them all.
"""

from agent.conversation.account import (
    Account,
    Promise,
    Terms,
    dollars,
    local_zone,
    spoken_date,
    spoken_time,
)
from agent.conversation.replies import Part, PolicyEvent, Reply, Templates, ToolOutcome

__all__ = [
    "Account",
    "Part",
    "PolicyEvent",
    "Promise",
    "Reply",
    "Templates",
    "Terms",
    "ToolOutcome",
    "dollars",
    "local_zone",
    "spoken_date",
    "spoken_time",
]
