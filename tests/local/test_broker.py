"""The embedded broker: start, reuse, status, stop, and the protocol facts the source relies on."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kappaplus.core.errors import BrokerError
from kappaplus.local.broker import MEMORY, EmbeddedBroker, create_topic, free_port, list_topics
from kappaplus.local.processes import pid_alive


def test_start_reuse_status_stop(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path, port=free_port())
    assert broker.status().running is False
    bootstrap = broker.start()
    try:
        status = broker.status()
        assert status.running and status.bootstrap == bootstrap
        assert status.pid is not None and pid_alive(status.pid)
        assert broker.pid_file.exists() and broker.log_file.exists()
        # A second start (another process would do the same) reuses the running broker.
        again = EmbeddedBroker(tmp_path).start()
        assert again == bootstrap
        assert EmbeddedBroker(tmp_path).status().pid == status.pid
    finally:
        assert broker.stop() is True
    assert not pid_alive(status.pid)
    assert not broker.pid_file.exists()
    assert broker.status().running is False
    assert broker.stop() is False


def test_context_manager_and_stale_pid_file(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path, port=free_port())
    broker.dir.mkdir(parents=True, exist_ok=True)
    # A pid file left by a crashed broker must not be mistaken for a running one.
    broker.pid_file.write_text('{"pid": 999999, "port": 1, "bootstrap": "127.0.0.1:1"}')
    with broker as bootstrap:
        assert bootstrap != "127.0.0.1:1"
        pid = broker.status().pid
        assert pid is not None and pid != 999999
    assert not pid_alive(pid)


def test_port_in_use_is_an_error(tmp_path: Path, kafka_bootstrap: str) -> None:
    port = int(kafka_bootstrap.rsplit(":", 1)[1])
    with pytest.raises(BrokerError, match=str(port)):
        EmbeddedBroker(tmp_path, port=port).start()


def test_session_broker_serves_topics(kafka_bootstrap: str, new_topic) -> None:  # type: ignore[no-untyped-def]
    topic = new_topic(partitions=3)
    assert list_topics(kafka_bootstrap)[topic] == 3
    assert os.environ.get("KAPPA_HOME")  # fixtures did not disturb the session home


def test_high_watermark_quirk_and_full_fetch(kafka_bootstrap: str, new_topic) -> None:  # type: ignore[no-untyped-def]
    """tansu reports base offset of the last batch + 1 as high watermark; fetch returns all."""
    topic = new_topic()
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "linger.ms": 200, "batch.num.messages": 1000}
    )
    for i in range(1000):
        producer.produce(topic, value=str(i).encode(), partition=0)
    assert producer.flush(10) == 0
    consumer = Consumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": "t", "enable.auto.commit": False}
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert low == 0
        assert 1 <= high <= 1000  # exact Kafka would say 1000; tansu says (last batch base)+1
        consumer.assign([TopicPartition(topic, 0, 0)])
        offsets: list[int] = []
        while len(offsets) < 1000:
            messages = consumer.consume(1000, 5.0)
            assert messages, f"fetch stalled after {len(offsets)} records"
            offsets.extend(m.offset() for m in messages if m.error() is None)
        assert offsets == list(range(1000))
    finally:
        consumer.close()


def test_cli_start_status_stop(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from kappaplus.cli import app

    runner = CliRunner()
    home = str(tmp_path)
    port = str(free_port())
    started = runner.invoke(app, ["broker", "start", "--home", home, "--port", port])
    try:
        assert started.exit_code == 0, started.output
        assert f"127.0.0.1:{port}" in started.output
        again = runner.invoke(app, ["broker", "start", "--home", home])
        assert again.exit_code == 0 and "already running" in again.output
        status = runner.invoke(app, ["broker", "status", "--home", home])
        assert status.exit_code == 0 and f"port {port}" in status.output
    finally:
        stopped = runner.invoke(app, ["broker", "stop", "--home", home])
    assert stopped.exit_code == 0 and "stopped" in stopped.output
    status = runner.invoke(app, ["broker", "status", "--home", home])
    assert status.exit_code == 1 and "no broker running" in status.output


def _produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, value=str(i).encode())
    assert producer.flush(10) == 0


def _read_all(bootstrap: str, topic: str, seconds: float = 5.0) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "t", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            values.append(message.value())
    consumer.close()
    return values


@pytest.mark.parametrize("durable", [False, True], ids=["memory", "s3"])
def test_restart_keeps_topics_only_with_s3_storage(tmp_path: Path, durable: bool) -> None:
    from kappaplus.local.s3 import ObjectStore, client_env

    store = ObjectStore(tmp_path, free_port())
    env = client_env(store.start()) if durable else {}
    port = free_port()
    storage = store.storage if durable else MEMORY
    try:
        bootstrap = EmbeddedBroker(tmp_path, port, storage=storage, env=env).start()
        create_topic(bootstrap, "kept", partitions=1)
        _produce(bootstrap, "kept", 50)
        assert EmbeddedBroker(tmp_path).stop() is True
        again = EmbeddedBroker(tmp_path, port, storage=storage, env=env).start()
        assert again == bootstrap
        if not durable:
            assert "kept" not in list_topics(bootstrap)
            return
        assert list_topics(bootstrap) == {"kept": 1}
        _produce(bootstrap, "kept", 50)  # appends after the records from before the restart
        values = _read_all(bootstrap, "kept")
        assert values == [str(i).encode() for i in range(50)] * 2
    finally:
        EmbeddedBroker(tmp_path).stop()
        store.stop()


def test_unsupported_storage_is_named(tmp_path: Path) -> None:
    with pytest.raises(BrokerError, match="sqlite://x.db.*not supported.*s3://BUCKET/"):
        EmbeddedBroker(tmp_path, storage="sqlite://x.db")
