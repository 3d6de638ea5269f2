"""A private network namespace for tests that put real WebRTC traffic on the wire.

aiortc's ICE layer leaves 127.0.0.1 out of its host candidates, and the browser
and the agent must not reach for this machine's other addresses. Inside a
namespace of its own the test has only a loopback interface, with a second
loopback address (127.0.0.2) that aiortc does offer, so all media stays on
loopback in a network nobody else shares.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

ADDRESS = "127.0.0.2"


@dataclass(frozen=True)
class Namespace:
    name: str

    def command(self, *argv: str) -> list[str]:
        """``argv`` run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *argv]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@contextmanager
def network_namespace() -> Iterator[Namespace]:
    ns = Namespace(f"agent-test-{uuid.uuid4().hex[:8]}")
    _ip("netns", "add", ns.name)
    try:
        _ip("-n", ns.name, "link", "set", "lo", "up")
        _ip("-n", ns.name, "addr", "add", f"{ADDRESS}/8", "dev", "lo")
        yield ns
    finally:
        _ip("netns", "del", ns.name)
