"""The database: its tables, the engine and the writer that every record goes through.

Re-exported here are the tables (the models, their enums and ``Base``), which need only
SQLAlchemy, so that the campaigns, the console and the tools read them from the package.
The engine and the writer (``agent.store.database``: Alembic and the settings) and the
recordings' blob storage (``agent.store.recordings``: aiohttp and the settings) are
imported from their modules, so that a reader of the tables does not load them.
"""

from agent.store.tables import (
    ApiToken,
    AttemptOutcome,
    AuditEntry,
    Base,
    Call,
    CallEvent,
    CallStatus,
    ConsentSource,
    Consumer,
    ContactAttempt,
    CostLine,
    Debt,
    MediaStreamToken,
    Phone,
    PhoneKind,
    Promise,
    PromiseStatus,
    Role,
    SeenWebhook,
    StatuteStatus,
    TenantType,
    Turn,
    User,
    UserSession,
    UTCDateTime,
)

__all__ = [
    "ApiToken",
    "AttemptOutcome",
    "AuditEntry",
    "Base",
    "Call",
    "CallEvent",
    "CallStatus",
    "ConsentSource",
    "Consumer",
    "ContactAttempt",
    "CostLine",
    "Debt",
    "MediaStreamToken",
    "Phone",
    "PhoneKind",
    "Promise",
    "PromiseStatus",
    "Role",
    "SeenWebhook",
    "StatuteStatus",
    "TenantType",
    "Turn",
    "UTCDateTime",
    "User",
    "UserSession",
]
