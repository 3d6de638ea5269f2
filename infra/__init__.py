"""Self-hosted model servers the agent calls over the network, and deployment files."""
