"""`@chains.route` endpoints on a real two-node Ray cluster: served through Serve's proxy below
the chainlet's route prefix, and called by another chainlet's stubs by method name."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.ray.cluster import RayCluster
from tests.ray.conftest import ROOT, Cli

pytestmark = pytest.mark.ray

ROUTED = ROOT / "tests" / "routes" / "routed_chain.py"
KEY = "ray-routes-key"

# What the entrypoint's stubs bring back from each of the shop's routes (as on the local target).
EXPECTED = [
    "7:teax3:hi",
    "tea 0",
    "tea 1",
    "either one: tea",
    "either event: tea 0",
    "either event: tea 1",
    "either event: tea 2",
]


def test_routes_are_served_through_serve_and_called_by_stubs(cli: Cli, ray_cluster: RayCluster) -> None:
    pushed = cli.push(str(ROUTED), "--name", "ray-routes", "--api-key", KEY)
    url = str(pushed["entrypoint_url"])
    assert url == f"{ray_cluster.proxy_url}/ray-routes/Front"
    auth = {"authorization": f"Bearer {KEY}"}
    with httpx.Client(timeout=60, verify=ray_cluster.ssl_context() or True) as client:
        # The entrypoint's own route, below its prefix, the whole body taken as the model.
        body = {"item": "cup", "quantity": 2, "colour": "blue"}
        echo = client.post(url + "/v1/echo", json=body, headers=auth)
        assert echo.status_code == 200, echo.text
        assert echo.json() == body
        assert client.post(url + "/v1/echo", json=body).status_code == 401
        # The Shop's routes, called by the entrypoint's stubs on the other replicas: a value,
        # a stream, and a value-or-stream both ways.
        called = client.post(url + "/run_remote", json={"item": "tea", "quantity": 3}, headers=auth)
        assert called.status_code == 200, called.text
        assert called.json() == EXPECTED
        # Described in the entrypoint's /openapi.json at the route's own path.
        paths = client.get(url + "/openapi.json", headers=auth).json()["paths"]
        assert "post" in paths["/v1/echo"]
    # And with the command line, by route.
    answer = cli.run(
        "call", "ray-routes", "--route", "POST /v1/echo", "--json", json.dumps(body), "--api-key", KEY
    )
    assert json.loads(answer.stdout) == body
