"""The broker's Prometheus metrics: cheap counters on the hot paths, families built at scrape time.

``counters`` holds what the request paths add to (plain integers and a list of request
timings, on the event loop, no locks); ``collector`` turns those and the broker's state
(partitions, ISRs, logs, groups, connections) into metric families with ``prometheus_client``
when ``/metrics`` is scraped; ``endpoint`` serves ``/metrics`` on the broker's event loop.
docs/metrics.md lists every metric, named as the Prometheus JMX exporter's Kafka rules name
Kafka's MBeans.
"""
