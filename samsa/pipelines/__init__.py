"""The seeds' data pipelines, on Spark through the ``samsa`` source and sink.

``samsa pipeline run activity|payments`` runs one; ``samsa pipeline generate …`` feeds it.
Each pipeline module has NAME, DESCRIPTION, its topics, ``run(spark, cfg)`` and
``generate(seed, clock)``, an endless iterator of (key, value) events.
"""

from __future__ import annotations

PIPELINES = {
    "activity": "samsa.pipelines.activity",
    "payments": "samsa.pipelines.payments",
}
DESCRIPTIONS = {
    "activity": "page views, searches and clicks -> per-page and per-user counts in 1-minute windows "
                "(topic + Parquet)",
    "payments": "card transactions -> rules engine (amount, velocity, country) -> decisions topic; "
                "transactions joined with decisions (Parquet)",
}
INPUTS = {"activity": "activity-events", "payments": "payments"}
