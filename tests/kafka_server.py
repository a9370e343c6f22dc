"""A real local Kafka-protocol broker for the tests, run by ``scripts/kafka.sh``.

The broker is noida-db (``requirements-dev.txt``), an independent implementation of the
Kafka protocol, started on a free port of 127.0.0.1 with its data in a temporary folder.
Nothing is mocked: the source and sink talk to it through librdkafka as to any broker.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from typing import Any

from script_server import ScriptServer


class LocalKafka(ScriptServer):
    """One broker in its own temporary folder; ``servers`` is its ``host:port``."""

    script = "kafka.sh"

    @property
    def servers(self) -> str | None:
        return self.address

    # ------------------------------------------------------------------ helpers for tests

    def admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.servers})

    def new_topic(self, prefix: str = "t", partitions: int = 1) -> str:
        """A new topic with a unique name."""
        from confluent_kafka.admin import NewTopic

        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        admin = self.admin()  # kept until the result is in: a dropped client cancels its requests
        admin.create_topics([NewTopic(name, partitions)])[name].result()
        return name

    def produce(
        self, topic: str, values: Iterable[Any], key: Any = None, partition: int | None = None,
        transactional_id: str | None = None, abort: bool = False,
    ) -> None:
        """Write ``values`` (dicts as JSON, str, bytes) to ``topic``; ``key``: a function of the
        value giving its key; with ``transactional_id``, in one transaction (aborted: ``abort``)."""
        from confluent_kafka import Producer

        config: dict[str, Any] = {"bootstrap.servers": self.servers, "linger.ms": 5, "partitioner": "murmur2_random"}
        if transactional_id:
            config["transactional.id"] = transactional_id
        p = Producer(config)
        if transactional_id:
            p.init_transactions(10)
            p.begin_transaction()
        for v in values:
            data = json.dumps(v).encode() if isinstance(v, dict) else (v.encode() if isinstance(v, str) else v)
            k = key(v) if key is not None else None
            k = k.encode() if isinstance(k, str) else k
            kwargs: dict[str, Any] = {} if partition is None else {"partition": partition}
            while True:
                try:
                    p.produce(topic, data, k, **kwargs)
                    break
                except BufferError:
                    p.poll(0.05)
        if transactional_id:
            if abort:
                p.flush(10)
                p.abort_transaction(10)
            else:
                p.commit_transaction(10)
        else:
            assert p.flush(30) == 0

    def read(self, topic: str, committed: bool = True, timeout: float = 10.0) -> list[dict]:
        """Every record of ``topic`` (all partitions, each in offset order) as
        ``{"partition", "offset", "key", "value"}`` with the value parsed from JSON when it is."""
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.servers, "group.id": f"read-{uuid.uuid4().hex[:6]}",
                      "isolation.level": "read_committed" if committed else "read_uncommitted",
                      "enable.auto.commit": False})
        try:
            meta = c.list_topics(topic, timeout=10).topics[topic]
            out = []
            for part in sorted(meta.partitions):
                tp = TopicPartition(topic, part)
                low, high = c.get_watermark_offsets(tp, timeout=10)
                if high <= low:
                    continue
                c.assign([TopicPartition(topic, part, low)])
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    msgs = c.consume(10_000, timeout=0.05)  # transaction markers hold offsets, deliver nothing
                    for m in msgs:
                        if m.error():
                            continue
                        raw = m.value()
                        try:
                            value = json.loads(raw)
                        except (ValueError, TypeError):
                            value = raw
                        key = m.key().decode() if m.key() is not None else None
                        out.append({"partition": part, "offset": m.offset(), "key": key, "value": value})
                    if c.position([tp])[0].offset >= high:
                        break
            return out
        finally:
            c.close()
