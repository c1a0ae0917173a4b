"""The throwaway PostgreSQL server now lives in ``tests/pg_server.py``, shared with tests/connect."""

from pg_server import PostgresServer  # noqa: F401
