"""What the ray target says when Ray's dashboard refuses a request: Ray's own reason, and
where else to look. The two-node cluster's dashboard cannot be made to refuse a log on cue
(it did when a node's agent was missing, by hand), so the refusal is built here as urllib
raises it, its body in the shape of the dashboard's error answers (``{"result": false, "msg": ...}``)."""

from __future__ import annotations

import email.message
import io
import urllib.error

from chains.targets.ray import _log_unreadable
from chains.targets.ray_replicas import ReplicaInfo, dashboard_error


def _refusal(body: bytes) -> urllib.error.HTTPError:
    return urllib.error.HTTPError(
        "http://head:8265/api/v0/logs/file",
        500,
        "Internal Server Error",
        email.message.Message(),
        io.BytesIO(body),
    )


def test_the_dashboards_reason_is_read_from_its_answer() -> None:
    ray_says = b'{"result": false, "msg": "Agent for node id: 3f2c doesn\'t exist.", "data": {}}'
    assert dashboard_error(_refusal(ray_says)) == "Agent for node id: 3f2c doesn't exist."
    assert dashboard_error(_refusal(b"upstream gone\n")) == "upstream gone"
    assert dashboard_error(_refusal(b"")) == "HTTP 500 Internal Server Error"


def test_an_unreadable_log_names_the_cause_the_node_and_where_the_log_is() -> None:
    replica = ReplicaInfo(
        chainlet="Entry", replica_id="r1", state="RUNNING", node_id="3f2c", node_ip="10.0.0.6",
        pid=42, actor_id="a1", started_at=0.0, log_file="/serve/replica_hello.Entry_Entry_r1.log",
    )  # fmt: skip
    message = _log_unreadable("Entry@10.0.0.6", replica, "Agent for node id: 3f2c doesn't exist.")
    assert "Ray says: Agent for node id: 3f2c doesn't exist." in message
    assert "node 10.0.0.6 is alive (`ray status`" in message
    assert "session_latest/logs/serve/replica_hello.Entry_Entry_r1.log" in message
    assert "HTTP Error 500" not in message
