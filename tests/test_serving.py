"""The command line every model server shares."""

from __future__ import annotations

from infra.serving import default_threads, server_arguments


def test_servers_listen_on_localhost_by_default() -> None:
    args = server_arguments("test").parse_args([])

    assert (args.host, args.port, args.log_level) == ("127.0.0.1", 8000, "INFO")


def test_servers_add_their_own_options() -> None:
    parser = server_arguments("test")
    parser.add_argument("--threads", type=int, default=default_threads())

    args = parser.parse_args(["--host", "0.0.0.0", "--port", "0", "--threads", "3"])

    assert (args.host, args.port, args.threads) == ("0.0.0.0", 0, 3)
    assert 1 <= default_threads() <= 4
