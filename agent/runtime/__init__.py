"""What one agent process sets up once and shares: the embedded model servers, the assets
every call uses, the supervisor of several workers."""
