"""What each call consumed, cost and took: turn and call records, the price book, latency
definitions, quantiles and the serving planner.

Re-exported here are the records every layer passes around (to the store's writer), the
price book and the stage profiles, with their functions; the whole package imports only the
standard library. Two parts are imported from their modules: the latency definitions
(``agent.ledger.latency``, read by name, as ``latency.DEFINITION``: their bare names say
nothing outside it) and the planner (``agent.ledger.plan``, a command whose main function
shares the module's name, so a re-export would hide the module). So are the places and
format tags of the files (``pricebook.DEFAULT_PATH``, ``stage_profiles.FORMAT``).
"""

from agent.ledger.pricebook import (
    SELF_HOSTED_STAGES,
    CallCost,
    CallUsage,
    CostLineItem,
    PriceBook,
    StagePlacement,
    price_call,
)
from agent.ledger.quantiles import percentile
from agent.ledger.records import (
    CALL_ID_LENGTH,
    DIRECTIONS,
    FLAG_KINDS,
    RECORD_TYPES,
    TRANSPORTS,
    CallEnded,
    CallEventRecord,
    CallOutcome,
    CallStarted,
    PromiseRecord,
    Record,
    TurnRecord,
    new_call_id,
)
from agent.ledger.stage_profiles import (
    AGENT_STAGES,
    MODEL_STAGES,
    RESPONSE_STAGES,
    STAGES,
    Placement,
    Profile,
    ProfileError,
    StageOption,
    load_profile,
    load_profiles,
    parse_profile,
    percentile_key,
    profile_document,
    profile_path_for,
    stage_option,
    write_profile,
)

__all__ = [
    "AGENT_STAGES",
    "CALL_ID_LENGTH",
    "DIRECTIONS",
    "FLAG_KINDS",
    "MODEL_STAGES",
    "RECORD_TYPES",
    "RESPONSE_STAGES",
    "SELF_HOSTED_STAGES",
    "STAGES",
    "TRANSPORTS",
    "CallCost",
    "CallEnded",
    "CallEventRecord",
    "CallOutcome",
    "CallStarted",
    "CallUsage",
    "CostLineItem",
    "Placement",
    "PriceBook",
    "Profile",
    "ProfileError",
    "PromiseRecord",
    "Record",
    "StageOption",
    "StagePlacement",
    "TurnRecord",
    "load_profile",
    "load_profiles",
    "new_call_id",
    "parse_profile",
    "percentile",
    "percentile_key",
    "price_call",
    "profile_document",
    "profile_path_for",
    "stage_option",
    "write_profile",
]
