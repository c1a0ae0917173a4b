"""Scraping a broker's /metrics and reading it with prometheus_client's own parser."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def scrape(url: str, timeout: float = 10.0) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample by its name: [(labels, value)]."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        text = response.read().decode()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    """The one sample of ``name`` with exactly ``labels``."""
    found = [v for ls, v in samples.get(name, []) if ls == labels]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]
