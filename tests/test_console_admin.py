"""The admin's user pages and the audit log page, over HTTP against a real store."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from agent.store.tables import AuditEntry, User
from tests.console import PEOPLE, console_client, hidden, log_in


@pytest.fixture
async def console(db_url: str, tmp_path: Path):
    async with console_client(db_url, tmp_path) as (client, engine):
        yield client, engine


async def test_an_admin_adds_and_disables_a_user(console) -> None:
    client, engine = console
    await log_in(client, "adam")
    page = await (await client.get("/console/users")).text()
    assert all(f'data-user="{name}"' in page for name in PEOPLE)
    token = hidden(page)
    added = await client.post(
        "/console/users",
        data={
            "username": "Nina",
            "role": "operator",
            "password": "her own long password",
            "csrf_token": token,
        },
        allow_redirects=False,
    )
    assert added.status == 303
    disabled = await client.post(
        "/console/users/olive/disable", data={"csrf_token": token}, allow_redirects=False
    )
    assert disabled.status == 303
    page = await (await client.get("/console/users")).text()
    assert 'data-user="nina"' in page
    assert re.search(r'data-user="olive">.*?<td>disabled</td>', page)
    with Session(engine) as session:
        adam = session.scalar(select(User.id).where(User.username == "adam"))
        nina, olive = (
            str(session.scalar(select(User.id).where(User.username == name)))
            for name in ("nina", "olive")
        )
        actions = [
            (a.action, a.user_id, a.object_id, a.ip, a.detail)
            for a in session.scalars(select(AuditEntry).where(AuditEntry.user_id == adam))
            if a.action.startswith("user_")
        ]
    # Made by the admin, from their address; the grant says which role.
    assert actions == [
        ("user_add", adam, nina, "127.0.0.1", "role operator"),
        ("user_disable", adam, olive, "127.0.0.1", None),
    ]
    owner = await client.get("/console/audit")
    assert f"<td>adam</td><td>user_add</td><td>{nina}</td><td>role operator</td>" in (
        await owner.text()
    )


async def test_bad_user_forms_are_refused_with_the_reason(console) -> None:
    client, _ = console
    await log_in(client, "adam")
    token = hidden(await (await client.get("/console/users")).text())
    cases = [
        ({"username": "nina", "role": "operator", "password": "short"}, "at least 12"),
        ({"username": "nina", "role": "pope", "password": "a long enough password"}, "role"),
        ({"username": "olive", "role": "owner", "password": "a long enough password"}, "exists"),
    ]
    for form, reason in cases:
        response = await client.post("/console/users", data={**form, "csrf_token": token})
        assert response.status == 400 and reason in await response.text()
    own = await client.post("/console/users/adam/disable", data={"csrf_token": token})
    assert own.status == 400 and "your own account" in await own.text()
    nobody = await client.post("/console/users/nobody/disable", data={"csrf_token": token})
    assert nobody.status == 400
    no_csrf = await client.post(
        "/console/users", data={"username": "x", "role": "operator", "password": "y" * 12}
    )
    assert no_csrf.status == 403


async def test_operators_and_owners_cannot_reach_the_user_pages(console) -> None:
    client, _ = console
    anonymous = await client.get("/console/users", allow_redirects=False)
    assert anonymous.status == 303
    for name in ("olive", "owen"):
        await log_in(client, name)
        assert (await client.get("/console/users")).status == 403
        page = await (await client.get("/console/queues" if name == "olive" else "/console")).text()
        assert 'href="/console/users"' not in page  # not in the menu either


async def test_the_audit_log_shows_who_did_what(console) -> None:
    client, _ = console
    await log_in(client, "olive")
    assert (await client.get("/console/audit")).status == 403
    await log_in(client, "owen")
    page = await (await client.get("/console/audit")).text()
    assert "<td>owen</td><td>login</td>" in page
    assert "<td>command line</td><td>user_add</td>" in page
    filtered = await (await client.get("/console/audit?object=nothing-like-this")).text()
    assert "No entries." in filtered
