"""The OpenAPI 3.1 document of the console's JSON API (``agent.console.api``).

Built from code so that it states the same limits, dispositions and cookie
name as the handlers that enforce them: this is the one description of the
routes, served at ``GET /api/openapi.json``. It holds no personal data.
"""

from __future__ import annotations

import copy
from typing import Any

from agent.console.query import CONTROL_CHARS
from agent.store.tables import PromiseStatus

VERSION = "1.0.0"
#: Characters the text parameters refuse: C0 and C1 controls (NUL among them, which
#: PostgreSQL cannot store in a string).
NO_CONTROL_CHARS = f"^[^{CONTROL_CHARS[1:-1]}]*$"


def _nullable(kind: str, **extra: Any) -> dict[str, Any]:
    return {"type": [kind, "null"], **extra}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _object(
    properties: dict[str, Any], *, required: list[str] | None = None, closed: bool = False
) -> dict[str, Any]:
    """An object schema; ``closed``: no property the schema does not list (so a field added
    to the response must be described here, tests/test_api.py)."""
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
    }
    if closed:
        schema["additionalProperties"] = False
    return schema


_DATE_TIME = {"type": "string", "format": "date-time"}
_DATE_TIME_OR_NULL = _nullable("string", format="date-time")
_MS = _nullable("number", minimum=0, description="milliseconds; null when not measured")


_CALL_SUMMARY = _object(
    {
        "id": {"type": "string"},
        "url": {"type": "string", "description": "this call's record in the API"},
        "started_at": _DATE_TIME,
        "transport": {"type": "string"},
        "direction": {"type": "string"},
        "disposition": _nullable("string"),
        "duration_s": _nullable("number"),
        "cost_usd": _nullable("number"),
        "consumer": _nullable("string", description="the consumer's name"),
        "number": _nullable(
            "string", description="the number dialled, masked to its last four digits"
        ),
        "flagged": {"type": "boolean", "description": "a compliance flag event is on it"},
        "debt_id": _nullable("integer"),
        "campaign": _nullable("string"),
    },
    required=[
        "id",
        "url",
        "started_at",
        "transport",
        "direction",
        "disposition",
        "duration_s",
        "cost_usd",
        "consumer",
        "number",
        "flagged",
        "debt_id",
    ],
)
_TURN = _object(
    {
        "number": {"type": "integer", "minimum": 0},
        "started_at": _DATE_TIME_OR_NULL,
        "ended_at": _DATE_TIME_OR_NULL,
        "user_text": _nullable("string"),
        "agent_text": _nullable("string"),
        "interrupted": {"type": "boolean"},
        "endpointing_ms": _MS,
        "stt_ms": _MS,
        "llm_ttft_ms": _MS,
        "tts_ttfb_ms": _MS,
        "transport_out_ms": _MS,
        "response_ms": _MS,
        "voice_to_voice_ms": _MS,
        "latency_definition": {"type": "integer", "enum": [1, 2]},
        "stt_audio_s": _nullable("number"),
        "llm_prompt_tokens": _nullable("integer"),
        "llm_completion_tokens": _nullable("integer"),
        "tts_characters": _nullable("integer"),
    }
)
_COST_LINE = _object(
    {
        "component": {"type": "string"},
        "quantity": {"type": "number"},
        "unit": {"type": "string"},
        "unit_price_usd": {"type": "number"},
        "amount_usd": {"type": "number"},
        "price_book_version": {"type": "string"},
    }
)
_EVENT = _object(
    {
        "id": {"type": "integer"},
        "at": _DATE_TIME,
        "kind": {"type": "string"},
        "detail": {"type": "object"},
    }
)
_PROMISE = _object(
    {
        "id": {"type": "integer"},
        "debt_id": {"type": "integer"},
        "amount_cents": {"type": "integer", "minimum": 1},
        "due_date": {"type": "string", "format": "date"},
        "method": {"type": "string"},
        "status": {"type": "string", "enum": [s.value for s in PromiseStatus]},
        "created_at": _DATE_TIME,
    }
)
_LEDGER = _object(
    {
        "attempts_used_7d": {"type": "integer"},
        "limit": {"type": "integer"},
        "next_allowed_at": _nullable(
            "string", format="date-time", description="null: no number may be called"
        ),
        "last_conversation_at": _DATE_TIME_OR_NULL,
    }
)
_CALL = _object(
    {
        "id": {"type": "string"},
        "transport": {"type": "string"},
        "direction": {"type": "string"},
        "scenario": _nullable("string"),
        "status": {"type": "string", "enum": ["active", "ended", "abnormal"]},
        "started_at": _DATE_TIME,
        "ended_at": _DATE_TIME_OR_NULL,
        "duration_s": _nullable("number"),
        "end_reason": _nullable("string"),
        "stt_model": _nullable("string"),
        "llm_model": _nullable("string"),
        "tts_voice": _nullable("string"),
        "prompt_version": _nullable("string"),
        "price_book_version": _nullable("string"),
        "cost_usd": _nullable("number"),
        "cost_per_minute_usd": _nullable("number"),
        "party": _nullable("string"),
        "disposition": _nullable("string"),
        "verified_at": _DATE_TIME_OR_NULL,
        "debt_id": _nullable("integer"),
        "consumer": {
            "oneOf": [
                _object({"id": {"type": "integer"}, "name": {"type": "string"}}),
                {"type": "null"},
            ]
        },
        "number": _nullable(
            "string",
            description="the consumer's number (caller id inbound, the number dialled "
            "outbound), masked to its last four digits",
        ),
        "campaign": _nullable("string"),
        "recording_uri": _nullable("string"),
        "flagged": {"type": "boolean"},
        "turns": {"type": "array", "items": _ref("Turn")},
        "cost_lines": {"type": "array", "items": _ref("CostLine")},
        "events": {"type": "array", "items": _ref("Event")},
        "promises": {"type": "array", "items": _ref("Promise")},
        "contact_ledger": {
            "oneOf": [_ref("Ledger"), {"type": "null"}],
            "description": "the debt's pre-dial ledger now; null for a call about no debt",
        },
    }
)
_DAY_COST = _object(
    {
        "day": {"type": "string", "format": "date"},
        "calls": {"type": "integer", "minimum": 0},
        "minutes": {"type": "number", "minimum": 0},
        "cost_usd": {"type": "number"},
        "usd_per_minute": _nullable("number"),
        "by_component": {
            "type": "object",
            "additionalProperties": _nullable("number"),
            "description": "each component's cost per connected minute (USD/min)",
        },
        "fallback_share": _nullable("number", description="tts_fallback over all TTS cost"),
        "declared_usd": {
            "type": "number",
            "description": "the part of cost_usd whose unit prices rest on declared figures",
        },
        "provisioned_usd": _nullable(
            "number",
            description="what the day really cost: the deployment's provisioned compute plus "
            "the metered lines, idle capacity included; null: no deployment known",
        ),
        "provisioned_usd_per_minute": _nullable(
            "number", description="provisioned_usd over the day's connected minutes"
        ),
        "utilization": {
            "type": "object",
            "additionalProperties": _nullable("number"),
            "description": "per stage (stt, llm, tts, worker): the compute the servers "
            "reported over the device seconds provisioned",
        },
        "worker_cpu_s_per_call": _nullable(
            "number", description="the agent worker's CPU seconds per call"
        ),
    },
    closed=True,
)
_DAY_LATENCY = _object(
    {
        "day": {"type": "string", "format": "date"},
        "turns": {"type": "integer", "minimum": 0},
        "response_p50_ms": _MS,
        "response_p95_ms": _MS,
        "voice_to_voice_p50_ms": _MS,
        "voice_to_voice_p95_ms": _MS,
    }
)
_FORECAST = _object(
    {
        "accounts": {"type": "integer", "minimum": 0},
        "connect_rate": _nullable("number", description="connected calls per call placed"),
        "minutes_per_connect": _nullable("number"),
        "expected_minutes": _nullable("number"),
        "attributed_usd": _nullable("number", description="expected minutes x attributed $/min"),
        "provisioned_usd": _nullable("number", description="expected minutes x provisioned $/min"),
    },
    closed=True,
)
_KPI = _object(
    {
        "name": {"type": "string"},
        "numerator": _nullable("number"),
        "denominator": _nullable("number"),
        "value": _nullable("number"),
        "note": _nullable("string", description="why value is null"),
    }
)
#: The document's schemas, by name: data, so that each reads as the JSON it describes.
_SCHEMAS: dict[str, Any] = {
    "Error": _object({"error": {"type": "string", "description": "what is wrong, in words"}}),
    "CallSummary": _CALL_SUMMARY,
    "CallList": _object(
        {
            "calls": {"type": "array", "items": _ref("CallSummary")},
            "next": _nullable(
                "string", description="the next (older) page's URL; null on the last page"
            ),
            "next_cursor": _nullable("string", description="the next page's `before`"),
        }
    ),
    "Call": _CALL,
    "Turn": _TURN,
    "TurnList": _object(
        {"call_id": {"type": "string"}, "turns": {"type": "array", "items": _ref("Turn")}}
    ),
    "CostLine": _COST_LINE,
    "Event": _EVENT,
    "Promise": _PROMISE,
    "Ledger": _LEDGER,
    "DayCost": _DAY_COST,
    "Costs": _object(
        {
            "from": {"type": "string", "format": "date"},
            "to": {"type": "string", "format": "date"},
            "components": {"type": "array", "items": {"type": "string"}},
            "days": {"type": "array", "items": _ref("DayCost")},
        },
        closed=True,
    ),
    "DayLatency": _DAY_LATENCY,
    "Kpi": _KPI,
    "Kpis": _object(
        {
            "start": {"type": "string", "format": "date"},
            "end": {"type": "string", "format": "date"},
            "target_usd_per_minute": {"type": "number"},
            "latency_target_ms": {"type": "number"},
            "voice_to_voice_target_ms": {"type": "number"},
            "response_p95_ms": _nullable("number"),
            "cost": {"type": "array", "items": _ref("DayCost")},
            "latency": {"type": "array", "items": _ref("DayLatency")},
            "kpis": {"type": "array", "items": _ref("Kpi")},
            "profile": _nullable(
                "string", description="the deployment profile the provisioned figures are for"
            ),
            "forecast": {
                "oneOf": [_ref("Forecast"), {"type": "null"}],
                "description": "a campaign's expected cost at the range's measured rates",
            },
            "owner_kpis": {
                "type": "array",
                "items": _ref("Kpi"),
                "description": "what the owner pays per result (cost per dollar promised)",
            },
            "usd_per_minute": _nullable(
                "number", description="the range's attributed cost per connected minute"
            ),
            "provisioned_usd_per_minute": _nullable(
                "number", description="the range's provisioned cost per connected minute"
            ),
            "declared_share": _nullable(
                "number", description="the share of the attributed cost on declared figures"
            ),
        },
        closed=True,
    ),
    "Forecast": _FORECAST,
}


def _error_response(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


_RESPONSES = {
    "BadRequest": _error_response("bad input: the message says which parameter and why"),
    "Unauthorized": _error_response("no session: log in first (POST /login)"),
    "Forbidden": _error_response("the user's role may not see this"),
    "NotFound": _error_response("no such call"),
}


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    """An optional query parameter: every filter of the API may be left out."""
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


def _day_parameter(name: str, description: str, first: str, last: str) -> dict[str, Any]:
    return _query(
        name,
        f"{description} (YYYY-MM-DD, a UTC day, inclusive; {first} to {last})",
        {"type": "string", "format": "date"},
    )


def _text_parameter(name: str, description: str, max_length: int) -> dict[str, Any]:
    return _query(
        name,
        description,
        {"type": "string", "maxLength": max_length, "pattern": NO_CONTROL_CHARS},
    )


def _parameter_ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/parameters/{name}"}


def _responses(ok: dict[str, Any], *errors: str) -> dict[str, Any]:
    out: dict[str, Any] = {"200": ok}
    codes = {"BadRequest": "400", "Unauthorized": "401", "Forbidden": "403", "NotFound": "404"}
    for name in errors:
        out[codes[name]] = {"$ref": f"#/components/responses/{name}"}
    return out


#: What every data route may answer besides 200: the data is personal or an aggregate.
_REFUSALS = ("BadRequest", "Unauthorized", "Forbidden")


def _get(
    operation_id: str,
    summary: str,
    description: str,
    parameters: list[dict[str, Any]],
    ok: dict[str, Any],
    *errors: str,
    deprecated: bool = False,
) -> dict[str, Any]:
    """A path item with one GET operation, answering ``ok`` or one of ``errors``."""
    operation: dict[str, Any] = {"operationId": operation_id}
    if deprecated:
        operation["deprecated"] = True
    operation |= {
        "summary": summary,
        "description": description,
        "parameters": parameters,
        "responses": _responses(ok, *_REFUSALS, *errors),
    }
    return {"get": operation}


def _call_filters(
    dispositions: tuple[str, ...], default_limit: int, max_limit: int, first_day: str, last_day: str
) -> list[dict[str, Any]]:
    """The call list's query: its filters, its keyset cursor and its page size."""
    limit = {"type": "integer", "minimum": 1, "maximum": max_limit, "default": default_limit}
    return [
        _query(
            "number",
            "digits the number dialled ends with; other characters are dropped (1 to 15 digits)",
            {"type": "string", "pattern": r"^\+?[0-9]{1,15}$"},
        ),
        _text_parameter("name", "part of the consumer's name, case-insensitive", 200),
        _query(
            "disposition",
            "the call's disposition, exactly",
            {"type": "string", "enum": list(dispositions)},
        ),
        _text_parameter("transport", "the call's transport, exactly", 32),
        _text_parameter("campaign", "the call's campaign, exactly", 128),
        _query(
            "flagged",
            "true: only calls with a compliance flag event (blocked_sentence, tool_denied, "
            "card_number_spoken, card_number_interrupted)",
            {"type": "boolean"},
        ),
        _day_parameter("from", "calls started on or after this day", first_day, last_day),
        _day_parameter("to", "calls started on or before this day", first_day, last_day),
        _query(
            "before",
            "the keyset cursor of a `next` link "
            "(`started_at~id` of the last call of the previous page)",
            {"type": "string", "maxLength": 100},
        ),
        _query("limit", "calls per page", limit),
    ]


def _paths(prefix: str, call_filters: list[dict[str, Any]], max_days: int) -> dict[str, Any]:
    """Every route of the API, by path: one GET each."""
    days = [_parameter_ref("from"), _parameter_ref("to")]
    in_range = (
        f"Both default to the last 30 days up to today (UTC); at most {max_days} days at a time."
    )
    call = (
        "Personal data: operators and owners. Each view is written to the "
        "audit log (`view_call`) before it is sent.",
        [_parameter_ref("call_id")],
        _json(_ref("Call"), "the call"),
        "NotFound",
    )
    return {
        f"{prefix}/calls": _get(
            "listCalls",
            "Calls, newest first, filtered and paged by a keyset cursor",
            "Personal data: operators and owners. Filters combine with AND. Pages are ordered "
            "by (started_at, id) descending; follow `next` for the older page.",
            call_filters,
            _json(_ref("CallList"), "a page of calls"),
        ),
        f"{prefix}/calls/{{call_id}}": _get(
            "getCall",
            "One call: the record, its turns, cost lines, events, promises, ledger",
            *call,
        ),
        f"{prefix}/calls/{{call_id}}/turns": _get(
            "listTurns",
            "A call's turns: what was said and each turn's latency parts",
            "Personal data: operators and owners. Written to the "
            "audit log (`view_transcript`) before it is sent.",
            [_parameter_ref("call_id")],
            _json(_ref("TurnList"), "the call's turns, in order"),
            "NotFound",
        ),
        f"{prefix}/costs": _get(
            "getCosts",
            "Cost by day and component (USD per connected minute)",
            f"Aggregates: owners. {in_range}",
            days,
            _json(_ref("Costs"), "cost by day"),
        ),
        f"{prefix}/kpis": _get(
            "getKpis",
            "The dashboard's figures: cost, latency percentiles, KPIs",
            f"The same figures as GET /api/kpis. Aggregates: owners. {in_range}",
            days,
            _json(_ref("Kpis"), "the figures"),
        ),
        "/api/calls/{call_id}": _get(
            "getCallLegacy",
            f"The same as GET {prefix}/calls/{{call_id}} (the older path)",
            *call,
            deprecated=True,
        ),
        "/api/openapi.json": {
            "get": {
                "operationId": "getOpenApi",
                "summary": "This document",
                "security": [],
                "responses": {"200": _json({"type": "object"}, "the OpenAPI document")},
            }
        },
    }


def _components(
    session_cookie: str, max_call_id: int, first_day: str, last_day: str
) -> dict[str, Any]:
    """What the paths refer to: the session cookie, shared parameters, responses, schemas."""
    call_id = {
        "type": "string",
        "minLength": 1,
        "maxLength": max_call_id,
        "pattern": NO_CONTROL_CHARS,
    }
    return {
        "securitySchemes": {
            "session": {
                "type": "apiKey",
                "in": "cookie",
                "name": session_cookie,
                "description": "The console's session cookie, set by POST /login "
                "(a form with the login CSRF token: see docs/console.md).",
            }
        },
        "parameters": {
            "call_id": {
                "name": "call_id",
                "in": "path",
                "required": True,
                "description": f"the call's id (1 to {max_call_id} characters)",
                "schema": call_id,
            },
            "from": _day_parameter("from", "the first day", first_day, last_day),
            "to": _day_parameter("to", "the last day", first_day, last_day),
        },
        "responses": copy.deepcopy(_RESPONSES),
        "schemas": copy.deepcopy(_SCHEMAS),
    }


def document(
    *,
    session_cookie: str,
    prefix: str,
    dispositions: tuple[str, ...],
    default_limit: int,
    max_limit: int,
    max_call_id: int,
    first_day: str,
    last_day: str,
    max_days: int,
) -> dict[str, Any]:
    """The OpenAPI document, for a server whose session cookie is ``session_cookie``."""
    call_filters = _call_filters(dispositions, default_limit, max_limit, first_day, last_day)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Collections voice agent: console API",
            "version": VERSION,
            "description": "Read-only JSON for the console's data: calls, turns, costs and "
            "KPIs. Authenticate with the console's session cookie (log in with POST /login; "
            'see docs/console.md, \'JSON API\'). Errors are JSON: `{"error": "..."}`.',
        },
        "servers": [{"url": "/"}],
        "security": [{"session": []}],
        "paths": _paths(prefix, call_filters, max_days),
        "components": _components(session_cookie, max_call_id, first_day, last_day),
    }
