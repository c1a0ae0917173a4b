"""config/prometheus-alerts.yml and config/grafana-dashboard.json: they parse, and every metric
they name is one a broker exports."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from samsa import Admin, Consumer, Producer, TopicPartition

CONFIG = Path(__file__).resolve().parents[2] / "config"
METRIC = re.compile(r"\b(?:kafka|samsa)_[a-z0-9_]+\b")


def exported(url: str) -> set[str]:
    """Every family and sample name the endpoint serves."""
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(s.name for s in family.samples)
    return names


def alert_expressions() -> list[tuple[str, str]]:
    rules = yaml.safe_load((CONFIG / "prometheus-alerts.yml").read_text())
    out = []
    for group in rules["groups"]:
        for rule in group["rules"]:
            assert rule["alert"] and rule["expr"] and rule["labels"]["severity"] in ("warning", "critical"), rule
            out.append((rule["alert"], rule["expr"]))
    return out


def dashboard_expressions() -> list[tuple[str, str]]:
    dashboard = json.loads((CONFIG / "grafana-dashboard.json").read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]


def test_the_alerts_operators_expect_are_there():
    names = {name for name, _ in alert_expressions()}
    assert {"UnderReplicatedPartitions", "OfflinePartitions", "NoActiveController", "ConsumerLagGrowing"} <= names


def test_every_metric_named_is_exported(metered_broker):
    b = metered_broker
    # a consumer group's committed offset, so the lag families have samples too
    with Producer({"bootstrap.servers": b.bootstrap}) as producer:
        producer.send("alerting", b"x", partition=0).result(30)
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "alerting-group"})
    try:
        consumer.commit({TopicPartition("alerting", 0): 0})
    finally:
        consumer.close()
    with Admin({"bootstrap.servers": b.bootstrap}) as admin:
        assert admin.list_consumer_group_offsets("alerting-group")
    names = exported(b.metrics_url)
    expressions = alert_expressions() + dashboard_expressions()
    assert len(expressions) > 20
    for where, expr in expressions:
        for metric in METRIC.findall(expr):
            assert metric in names, f"{where}: {metric} is not exported"
