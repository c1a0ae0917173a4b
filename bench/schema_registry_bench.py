"""Schema registry and Avro serdes figures: a `samsa schema-registry` process on an embedded broker.

    .venv/bin/python bench/schema_registry_bench.py [--schemas 300] [--records 50000]

- registrations per second (each a new schema: the writer appends to _schemas and reads it back),
  and schema-by-id look-ups per second through the REST API, one request at a time with Samsa's
  registry client (urllib); and one look-up's time with confluent-kafka's client (cache cleared),
- Avro serialization of one record shape: Samsa's KafkaAvroSerializer and confluent-kafka's
  AvroSerializer, records per second (both on fastavro; ids cached after the first).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import samsa.embedded  # noqa: E402
from registry_process import RegistryProcess  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--schemas", type=int, default=300)
    ap.add_argument("--records", type=int, default=50000)
    args = ap.parse_args()
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from samsa.serialization.avro import KafkaAvroSerializer
    with samsa.embedded.Broker({"num.partitions": 1}) as broker, tempfile.TemporaryDirectory() as tmp:
        reg = RegistryProcess(Path(tmp), broker.bootstrap_servers,
                              **{"schema.registry.group.session.timeout.ms": "10000"}).start()
        try:
            sr = SchemaRegistryClient({"url": reg.url})
            schemas = [json.dumps({"type": "record", "name": f"R{i}", "fields": [{"name": "f", "type": "int"}]})
                       for i in range(args.schemas)]
            from samsa.serialization.schema_registry import SchemaRegistryClient as SamsaClient
            mine = SamsaClient(reg.url)
            mine.register("warm-up", {"schema": schemas[0]})
            t0 = time.perf_counter()
            ids = [mine.register(f"bench-{i}", {"schema": s}) for i, s in enumerate(schemas)]
            reg_rate = len(ids) / (time.perf_counter() - t0)
            t0 = time.perf_counter()
            for i in ids:
                mine.request("GET", f"/schemas/ids/{i}")
            get_rate = len(ids) / (time.perf_counter() - t0)
            t0 = time.perf_counter()
            for i in ids[:50]:
                sr.clear_caches()
                sr.get_schema(i)
            confluent_get_ms = (time.perf_counter() - t0) / 50 * 1000
            user = {"type": "record", "name": "User", "fields": [
                {"name": "name", "type": "string"}, {"name": "visits", "type": "int"},
                {"name": "email", "type": ["null", "string"], "default": None}]}
            record = {"name": "ada lovelace", "visits": 42, "email": "ada@example.org"}
            ours = KafkaAvroSerializer(user, {"schema.registry.url": reg.url})
            theirs = AvroSerializer(sr, json.dumps(user))
            ctx = SerializationContext("bench", MessageField.VALUE)
            assert ours.serialize("bench", record) == theirs(record, ctx)
            t0 = time.perf_counter()
            for _ in range(args.records):
                ours.serialize("bench", record)
            ours_rate = args.records / (time.perf_counter() - t0)
            t0 = time.perf_counter()
            for _ in range(args.records):
                theirs(record, ctx)
            theirs_rate = args.records / (time.perf_counter() - t0)
        finally:
            reg.stop()
    print(f"registrations/s (new schemas): {reg_rate:,.0f}")
    print(f"GET /schemas/ids/{{id}}/s: {get_rate:,.0f}")
    print(f"confluent-kafka SchemaRegistryClient.get_schema (cache cleared): {confluent_get_ms:.1f} ms each")
    print(f"Avro serialize records/s: samsa {ours_rate:,.0f}, confluent-kafka {theirs_rate:,.0f}")


if __name__ == "__main__":
    main()
