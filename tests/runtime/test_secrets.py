"""Secrets never show: one of each secret client setting planted in a job configuration, a
stream run of the job, and none of the values anywhere kappaplus prints or writes (console,
logs, the run record, checkpoints, ``kappa status``, reprs, errors)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import EXAMPLES, uid

from kappaplus.config import config_from_dict
from kappaplus.core.errors import ConfigError
from kappaplus.core.kafka_conf import JAVA_ONLY_SETTINGS, client_conf
from kappaplus.core.secrets import SECRET_SETTINGS, is_secret, mask_url, redact
from kappaplus.examples.generate import arrival_order, produce, rider_events

# the secret settings librdkafka accepts (the Java-only ones are refused, below)
LIBRDKAFKA_SECRETS = {
    "sasl.password": "plainPW-0001",
    "sasl.oauthbearer.client.secret": "oauthSECRET-0002",
    "ssl.key.password": "keyPW-0003",
    "ssl.key.pem": "-----BEGIN PRIVATE KEY-----MIIEsecretPEM0004-----END PRIVATE KEY-----",
    "ssl.keystore.password": "keystorePW-0005",
    "sasl.oauthbearer.config": "principal=bob secret=oauthCFG-0006",
}
JAVA_SECRETS = {
    "sasl.jaas.config": 'PlainLoginModule required username="u" password="jaasPW-0007";',
    "ssl.truststore.password": "truststorePW-0008",
    "ssl.keystore.key": "keystoreKEY-0009",
}


def test_the_one_list_decides() -> None:
    for name in [*LIBRDKAFKA_SECRETS, *JAVA_SECRETS]:
        assert is_secret(name) and is_secret(f"kafka.{name}") and is_secret(name.upper())
    for name in ("kafka.sasl.mechanism", "kafka.sasl.username", "kafka.ssl.key.location"):
        assert not is_secret(name)
    assert len(set(SECRET_SETTINGS)) == len(SECRET_SETTINGS)
    assert redact({"a": [{"kafka.sasl.password": "x"}]}) == {"a": [{"kafka.sasl.password": "***"}]}
    assert (
        mask_url("thrift://u:pw@h:9083 and http://h:1/x")
        == "thrift://u:***@h:9083 and http://h:1/x"
    )


def test_java_only_settings_are_refused_without_showing_them() -> None:
    for name, value in JAVA_SECRETS.items():
        assert name in JAVA_ONLY_SETTINGS
        with pytest.raises(ConfigError) as caught:
            client_conf({"kafka.bootstrap.servers": "h:9092", f"kafka.{name}": value})
        assert f"kafka.{name}" in str(caught.value) and value not in str(caught.value)
        raw = {
            "job": "kappaplus.examples.sessionization:JOB",
            "inputs": {
                "e": {
                    "kafka": {
                        "topic": "t",
                        "bootstrap_servers": "h:9092",
                        "options": {f"kafka.{name}": value},
                    }
                }
            },
        }
        with pytest.raises(ConfigError) as caught:
            config_from_dict(raw)
        assert name in str(caught.value) and value not in str(caught.value)


def _toml(data: dict[str, Any], prefix: str = "") -> str:
    """A small TOML writer with quoted keys (client settings contain dots)."""
    lines, tables = [], []
    for key, value in data.items():
        if isinstance(value, dict):
            tables.append((key, value))
        else:
            lines.append(f"{json.dumps(key)} = {json.dumps(value)}")
    text = "\n".join(lines) + "\n"
    for key, value in tables:
        name = f"{prefix}.{json.dumps(key)}" if prefix else json.dumps(key)
        text += f"\n[{name}]\n" + _toml(value, name)
    return text


def test_no_secret_anywhere_after_a_run(
    kafka_bootstrap: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    """``kappa run`` in a process of its own (so the output of its JVM and Python workers is
    seen too), then ``kappa status``; everything either printed, and every file under the
    state directory and the checkpoints, is searched for the secret values."""
    events = rider_events(riders=5, start="2024-03-01T00:00:00", hours=2, seed=5)
    topic, dlq = new_topic(prefix="secret-events"), new_topic(prefix="secret-dlq")
    produce(kafka_bootstrap, topic, arrival_order(events), extra=[b"not json"])
    options = {f"kafka.{k}": v for k, v in LIBRDKAFKA_SECRETS.items()}
    options["kafka.security.protocol"] = "plaintext"
    raw = tomllib.loads((EXAMPLES / "sessionization.toml").read_text())
    raw["checkpoint_dir"] = str(tmp_path / "checkpoints")
    raw["inputs"]["rider_events"]["kafka"] = {
        "topic": topic,
        "bootstrap_servers": kafka_bootstrap,
        "starting_offsets": "earliest",
        "options": options,
        "dlq": {"topic": dlq},
    }
    raw["outputs"] = {"sessions": {"hive": {"table": f"secret_sessions_{uid()}"}}}
    config = tmp_path / "secret-job.toml"  # the one file that holds them; not searched
    config.write_text(_toml(raw))
    home = tmp_path / "home"
    env = {**os.environ, "KAPPA_HOME": str(home), "KAPPA_DRIVER_MEMORY": "1g"}
    env.pop("KAPPA_METASTORE_URI", None)
    kappa = str(Path(sys.executable).parent / "kappa")
    run = subprocess.run(
        [kappa, "run", "sessionization", "--config", str(config), "--mode", "stream"]
        + ["--trigger", "available-now", "--no-progress"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    status = subprocess.run(
        [kappa, "status", "--json"], capture_output=True, text=True, env=env, timeout=300
    )
    assert status.returncode == 0, status.stderr[-3000:]
    seen = [run.stdout, run.stderr, status.stdout, status.stderr]
    files = [p for p in [*home.rglob("*"), *(tmp_path / "checkpoints").rglob("*")] if p.is_file()]
    for path in files:
        if path.stat().st_size < 20_000_000:
            seen.append(path.read_bytes().decode("utf-8", "replace"))
    text = "\n".join(seen)
    assert '"status": "finished"' in status.stdout and topic in text, status.stdout
    assert any(p.parent.name == "runs" for p in files), "the run record was searched"
    assert any(p.parent.name == "offsets" for p in files), "the checkpoints were searched"
    leaked = [name for name, value in LIBRDKAFKA_SECRETS.items() if value in text]
    assert leaked == [], f"secret values of {leaked} were printed or written"
