"""Kafka Connect in Python: connectors, tasks, converters, transforms, a worker and its REST API.

``samsa connect-standalone`` and ``samsa connect-distributed`` run a worker
(:mod:`samsa.connect.standalone`, :mod:`samsa.connect.distributed`); connectors are classes
found by Kafka's names (:mod:`samsa.connect.plugins`). Connect is a client program: it talks
to brokers through Samsa's Producer, Consumer and Admin only.
"""
