"""Network calls turned into audio frames and events, and back. Knows nothing of debts."""
