"""Decided payments into PostgreSQL, for analysts who query SQL rather than Parquet.

A ``foreachBatch`` function: each micro-batch's rows are copied into a temporary table and
inserted with ``ON CONFLICT (tx_id) DO NOTHING``, in one transaction, so a micro-batch that
Spark runs again after a crash adds nothing twice.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

COLUMNS = ["tx_id", "card_id", "amount", "currency", "merchant", "country", "card_country", "tx_time", "decision",
           "reasons", "decided_at", "latency_ms"]
DDL = """CREATE TABLE IF NOT EXISTS {table} (
    tx_id text PRIMARY KEY, card_id text NOT NULL, amount double precision NOT NULL, currency text NOT NULL,
    merchant text NOT NULL, country text NOT NULL, card_country text NOT NULL, tx_time timestamptz NOT NULL,
    decision text NOT NULL, reasons text[] NOT NULL, decided_at timestamptz NOT NULL, latency_ms bigint)"""


class PostgresArchive:
    def __init__(self, dsn: str, table: str = "decided_payments"):
        self.dsn = dsn
        self.table = table

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        import psycopg  # only needed when a DSN is configured
        rows = df.select(*COLUMNS).collect()
        with psycopg.connect(self.dsn) as conn:
            conn.execute(DDL.format(table=self.table))
            if not rows:
                return
            conn.execute(f"CREATE TEMP TABLE incoming (LIKE {self.table}) ON COMMIT DROP")
            with conn.cursor().copy(f"COPY incoming ({', '.join(COLUMNS)}) FROM STDIN") as copy:
                for r in rows:  # Spark hands timestamps over as naive local times
                    copy.write_row([*r[:7], r.tx_time.astimezone(), r.decision, list(r.reasons),
                                    r.decided_at.astimezone(), r.latency_ms])
            conn.execute(f"INSERT INTO {self.table} SELECT * FROM incoming ON CONFLICT (tx_id) DO NOTHING")
