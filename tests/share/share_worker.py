"""A confluent-kafka ShareConsumer in a process of its own, for the SIGKILL scenario
(tests/share/test_share_consumers.py): explicit acknowledgement; prints ``rec <value> <delivery
count>`` for each record of its first non-empty poll, then holds them, unacknowledged, until it
is killed. Arguments: bootstrap group topic."""

import sys
import threading

from confluent_kafka import ShareConsumer

c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "log_level": 3,
                   "share.acknowledgement.mode": "explicit"})
c.subscribe([sys.argv[3]])
while True:
    records = [m for m in c.poll(0.5) if not m.error()]
    for m in records:
        print("rec", m.value().decode(), m.delivery_count(), flush=True)
    if records:
        threading.Event().wait()  # mid-batch: nothing acknowledged, until SIGKILL
