"""The console's sections, the roles that may open each, and where a user lands.

The menu shows a user only what their role may open; each route still checks
the role itself (``require_role``), the menu is a convenience, not the guard.
"""

from __future__ import annotations

from agent.store.tables import Role

NAV = (
    ("/console", "Calls", (Role.OPERATOR, Role.OWNER)),
    ("/console/live", "Live", (Role.OPERATOR, Role.OWNER)),
    ("/console/queues", "Queues", (Role.OPERATOR, Role.OWNER)),
    ("/console/dashboard", "Dashboard", (Role.OWNER,)),
    ("/console/audit", "Audit log", (Role.OWNER, Role.ADMIN)),
    ("/console/users", "Users", (Role.ADMIN,)),
    ("/console/tokens", "API tokens", (Role.ADMIN,)),
)


#: Where each role lands after logging in: the section its work starts from.
HOME = {
    Role.OPERATOR: "/console",
    Role.OWNER: "/console/dashboard",
    Role.ADMIN: "/console/users",
}


def home(role: Role) -> str:
    return HOME[role]
