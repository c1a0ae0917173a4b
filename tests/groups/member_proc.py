"""A consumer-group member in a process of its own, for tests that SIGKILL it (no LeaveGroup).

Argument: one JSON object {bootstrap, group, topics, name, commit, conf}. Prints one JSON event
per line, flushed at once:

    {"ev": "assign"|"revoke"|"lost", "partitions": [...]}
    {"ev": "rec", "p": partition, "o": offset, "v": value}
    {"ev": "try", "p": p, "o": offset to commit}   then   {"ev": "ack", ...} or {"ev": "fail", ...}

commit = "each": commit every record synchronously, right after reading it; after a failed
commit it stops committing (so that at most one unacknowledged commit is ever sent) but keeps
consuming. "none": never commit. SIGTERM closes the consumer (LeaveGroup) and exits.
"""

import json
import signal
import sys

from confluent_kafka import Consumer, KafkaException

args = json.loads(sys.argv[1])
stopping = False


def out(**ev):
    sys.stdout.write(json.dumps(ev) + "\n")
    sys.stdout.flush()


def on_term(signum, frame):
    global stopping
    stopping = True


signal.signal(signal.SIGTERM, on_term)
c = Consumer({"bootstrap.servers": args["bootstrap"], "group.id": args["group"], "client.id": args["name"],
              **args["conf"]})
c.subscribe(args["topics"],
            on_assign=lambda c, tps: out(ev="assign", partitions=[tp.partition for tp in tps]),
            on_revoke=lambda c, tps: out(ev="revoke", partitions=[tp.partition for tp in tps]),
            on_lost=lambda c, tps: out(ev="lost", partitions=[tp.partition for tp in tps]))
out(ev="subscribed")
committing = args["commit"] == "each"
while not stopping:
    m = c.poll(0.1)
    if m is None or m.error():
        continue
    out(ev="rec", p=m.partition(), o=m.offset(), v=m.value().decode())
    if committing:
        out(ev="try", p=m.partition(), o=m.offset() + 1)
        try:
            c.commit(message=m, asynchronous=False)
        except KafkaException as e:
            out(ev="fail", p=m.partition(), o=m.offset() + 1, error=str(e))
            committing = False
        else:
            out(ev="ack", p=m.partition(), o=m.offset() + 1)
c.close()
out(ev="closed")
