"""``samsa schema-registry``: the Schema Registry's REST API over schemas kept in a compacted topic."""
