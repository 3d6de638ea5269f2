"""Helpers for the console's tests: a server on the real runtime, people, logging in."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from agent.config import Settings
from agent.console.users import Users
from agent.runtime.context import AgentRuntime
from agent.server.app import make_app
from agent.store.tables import Consumer, Debt, Phone

#: username: (password, role); each test that needs people gets these.
PEOPLE = {
    "olive": ("a long operator password", "operator"),
    "owen": ("a long owner password!", "owner"),
    "adam": ("a long admin password!", "admin"),
}


@asynccontextmanager
async def console_client(
    db_url: str, tmp_path: Path, populate: Callable[[Engine], None] | None = None, **env: str
) -> AsyncIterator[tuple[TestClient, Engine]]:
    """The agent's app (stub models) on ``db_url``, with ``PEOPLE`` and ``populate``'s rows."""
    settings = Settings.from_env({"DATABASE_URL": db_url, "DATA_DIR": str(tmp_path), **env})
    async with AgentRuntime(settings, stub_models=True) as ctx:
        users = Users(ctx.engine)
        for name, (password, role) in PEOPLE.items():
            await asyncio.to_thread(users.add, name, password, role)
        if populate is not None:
            await asyncio.to_thread(populate, ctx.engine)
        async with TestClient(TestServer(make_app(ctx))) as client:
            yield client, ctx.engine


def add_consumer(session: Session, ref: str, name: str, number: str) -> tuple[Debt, Phone]:
    """A consumer of the portfolio with one phone and one debt, flushed (ids known)."""
    consumer = Consumer(
        external_ref=ref,
        name=name,
        address="12 Elm St, Springfield",
        state="IL",
        city="Springfield",
        time_zone="America/Chicago",
    )
    phone = Phone(number=number, kind="personal", consent_source="creditor_provided")
    debt = Debt(
        account_ref=f"acct-{ref}",
        account_last4="4321",
        creditor="First Example Bank",
        balance_cents=125_000,
        statute_status="within",
        tenant_type="third_party_collector",
        max_discount_pct=20,
        min_installment_cents=5_000,
        max_term_months=12,
    )
    consumer.phones.append(phone)
    consumer.debts.append(debt)
    session.add(consumer)
    session.flush()
    return debt, phone


def hidden(page: str, name: str = "csrf_token") -> str:
    """The value of the form field ``name`` in ``page``."""
    found = re.search(rf'name="{name}" value="([^"]+)"', page)
    assert found, f"no {name} field in the page"
    return found.group(1)


async def log_in(client: TestClient, username: str = "olive") -> None:
    form = await client.get("/login")
    done = await client.post(
        "/login",
        data={
            "username": username,
            "password": PEOPLE[username][0],
            "csrf_token": hidden(await form.text()),
        },
        allow_redirects=False,
    )
    assert done.status == 303, await done.text()
