"""The call: pipeline, service clients, latency and cost ledger, storage, web server."""
