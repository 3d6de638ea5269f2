"""The database: its tables, the engine and the writer that every record goes through."""
