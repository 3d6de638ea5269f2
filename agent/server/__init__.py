"""The agent's HTTP app: its routes, hygiene, metrics and web assets."""
