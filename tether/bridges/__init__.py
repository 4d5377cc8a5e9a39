"""Bridges from message brokers into session mailboxes: at-least-once in, exactly-once stored.

``tether.bridges`` holds what every bridge shares (``Inbound``, ``Routed``, ``json_envelope``,
``BridgeStats``); each broker has its own module, importable once its client is installed:

- ``tether.bridges.redis_streams.RedisStreamsBridge`` (``pip install 'tether[redis]'``)
- ``tether.bridges.nats_jetstream.JetStreamBridge`` (``pip install 'tether[nats]'``)

See ``docs/bridges.md`` for the pattern, and for Kafka, SQS and chat webhooks.
"""

from tether.bridges.ingest import BridgeStats as BridgeStats
from tether.bridges.ingest import Decode as Decode
from tether.bridges.ingest import Inbound as Inbound
from tether.bridges.ingest import Routed as Routed
from tether.bridges.ingest import json_envelope as json_envelope

__all__ = ("BridgeStats", "Decode", "Inbound", "Routed", "json_envelope")
