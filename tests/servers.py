"""Model servers as child processes for tests, started through the agent's own launcher.

Use from a session-scoped fixture so each server (and its model) loads once per run::

    @pytest.fixture(scope="session")
    def stt_url(tmp_path_factory):
        with running_server("stt", "infra.stt_server", tmp_path_factory.mktemp("logs")) as s:
            yield s.base_url
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from agent.runtime.embedded import ServerProcess


@contextmanager
def running_server(
    name: str, module: str, log_dir: Path, args: Sequence[str] = (), timeout: float = 180.0
) -> Iterator[ServerProcess]:
    """Start ``python -m module`` on a free port, wait for /health, stop it afterwards."""
    server = ServerProcess.launch(name, module, log_dir=log_dir, args=args)
    try:
        asyncio.run(server.wait_healthy(timeout))
        yield server
    finally:
        asyncio.run(server.stop())
