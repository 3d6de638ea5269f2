"""Outbound work: the pre-dial gate, the dialer, portfolio and campaign files.

The gate (``predial``, its rules in ``contact_rules``, what a call tells it in
``contact_history``) and the portfolio are re-exported here. The dialer is not: it
brings the SIP stack, which a caller of the gate alone (the console, the tools) does
not need; import it from ``agent.campaigns.dialer``.
"""

from agent.campaigns.contact_history import (
    GATE_SIGNALS,
    Signal,
    apply_signal,
    counts_towards_caps,
    record_call,
    record_callback_consent,
    record_conversation,
    record_outcome,
)
from agent.campaigns.contact_rules import (
    CONTACT_CAPS,
    ContactCap,
    InconvenientWindow,
    consumer_time_zone,
    masked,
)
from agent.campaigns.portfolio import (
    UNMATCHED_CALLER,
    CallerMatch,
    ImportReport,
    PortfolioError,
    account_for,
    import_portfolio,
    match_caller,
)
from agent.campaigns.predial import (
    Decision,
    DialRequest,
    Ledger,
    check,
    contact_ledger,
    reserve_attempt,
)

__all__ = [
    "CONTACT_CAPS",
    "GATE_SIGNALS",
    "UNMATCHED_CALLER",
    "CallerMatch",
    "ContactCap",
    "Decision",
    "DialRequest",
    "ImportReport",
    "InconvenientWindow",
    "Ledger",
    "PortfolioError",
    "Signal",
    "account_for",
    "apply_signal",
    "check",
    "consumer_time_zone",
    "contact_ledger",
    "counts_towards_caps",
    "import_portfolio",
    "masked",
    "match_caller",
    "record_call",
    "record_callback_consent",
    "record_conversation",
    "record_outcome",
    "reserve_attempt",
]
