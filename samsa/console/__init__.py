"""``samsa console``: a web console for any Kafka-compatible cluster, built on Samsa's clients.

It is a separate process that talks to the brokers over the wire (Admin and Consumer) and,
when it is given their ``/metrics`` URLs, reads the brokers' Prometheus metrics for live
figures. ``service`` gathers what the pages show, ``browse`` reads messages, ``reset``
plans offset resets as ``samsa consumer-groups --reset-offsets`` does, ``live`` turns
scrapes into rates, and ``app`` is the Starlette application with its Jinja2 pages.
"""
