"""A consume-transform-produce loop in a process of its own, for tests that SIGKILL it.

Argument: one JSON object {bootstrap, group, source, sink, txn_id}. Reads ``source`` as a
member of ``group`` (read_committed), writes ``b"out-" + value`` to ``sink`` and commits the
input offsets in the same transaction, a few records per transaction, forever. Prints one
line per committed transaction ("committed <n>"), flushed at once.
"""

import json
import sys

from confluent_kafka import Consumer, Producer, TopicPartition

args = json.loads(sys.argv[1])
consumer = Consumer({"bootstrap.servers": args["bootstrap"], "group.id": args["group"],
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "isolation.level": "read_committed", "session.timeout.ms": 6000})
producer = Producer({"bootstrap.servers": args["bootstrap"], "transactional.id": args["txn_id"], "linger.ms": 5})
producer.init_transactions(60)
consumer.subscribe([args["source"]])
while True:
    msgs = [m for m in consumer.consume(5, 0.5) if not m.error()]
    if not msgs:
        continue
    producer.begin_transaction()
    for m in msgs:
        producer.produce(args["sink"], b"out-" + m.value(), partition=m.partition())
    producer.flush(30)  # the outputs are in the log, uncommitted: a SIGKILL now leaves an open transaction
    positions = [TopicPartition(tp.topic, tp.partition, tp.offset) for tp in consumer.position(consumer.assignment())]
    producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(60)
    sys.stdout.write(f"committed {len(msgs)}\n")
    sys.stdout.flush()
