"""admin: the HTTP server's own behaviour through real HTTP — binding, health/readiness, /metrics,
the OpenAPI document, JSON errors for unknown endpoints and methods. The partition endpoints run
against a real broker in tests/integration/test_admin_api.py.

The broker here is only the two attributes start_admin reads before any log exists (config and
metrics, both real objects) plus `ready`."""
from __future__ import annotations

import socket
import types

import aiohttp
import pytest

from kompakt.broker.admin.app import routes, start_admin, stop_admin
from kompakt.broker.admin.openapi import OPENAPI
from kompakt.broker.observability.metrics import Metrics
from kompakt.config.broker_config import BrokerConfig


def bare_broker(**overrides):
    cfg = BrokerConfig.load(overrides=[f"{k}={v}" for k, v in overrides.items()], environ={})
    return types.SimpleNamespace(config=cfg, metrics=Metrics(cfg["metrics.partition.labels"]), ready=False,
                                 log_manager=None, cleaner=None)


@pytest.fixture
async def served():
    broker = bare_broker()
    handle = await start_admin(broker, port=0)
    async with aiohttp.ClientSession(handle.url) as http:
        yield broker, handle, http
    await stop_admin(handle)


async def test_health_ready_and_metrics(served):
    broker, handle, http = served
    async with http.get("/health") as r:
        assert r.status == 200 and (await r.json()) == {"status": "ok"}
    async with http.get("/ready") as r:
        assert r.status == 503 and (await r.json())["ready"] is False
    broker.ready = True
    async with http.get("/ready") as r:
        assert r.status == 200
    async with http.get("/metrics") as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = await r.text()
    assert "kompakt_broker_ready 1.0" in text
    assert "kompakt_broker_uptime_seconds" in text


async def test_unknown_endpoint_and_method_are_json_errors(served):
    _, _, http = served
    async with http.get("/v2/nothing") as r:
        body = await r.json()
        assert r.status == 404 and body["error"] == "not_found" and "/openapi.json" in body["message"]
    async with http.post("/metrics") as r:
        body = await r.json()
        assert r.status == 405 and body["error"] == "method_not_allowed"


async def test_partition_endpoints_before_logs_load_answer_503(served):
    _, _, http = served
    async with http.get("/v1/partitions") as r:
        assert r.status == 503 and "retry when /ready" in (await r.json())["message"]


async def test_openapi_describes_every_route(served):
    _, _, http = served
    async with http.get("/openapi.json") as r:
        doc = await r.json()
    assert doc == OPENAPI
    from kompakt.broker.admin.whatif import routes as whatif_routes
    served_routes = {(rd.method.lower(), rd.path) for rd in [*routes, *whatif_routes]}
    described = {(method, path) for path, ops in doc["paths"].items() for method in ops}
    assert served_routes == described


async def test_port_clash_fails_at_start_with_advice():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot bind the admin API to 127.0.0.1:{port}.*metrics.port"):
            start_admin(bare_broker(), port=port)


async def test_metrics_port_zero_disables():
    handle = start_admin(bare_broker(**{"metrics.port": 0}))
    assert handle.port is None and handle.url is None
    await stop_admin(handle)


async def test_metrics_are_gzipped_when_asked(served):
    broker, handle, http = served
    for i in range(200):  # enough series to be worth compressing
        broker.metrics.record_produce(f"topic-{i}", 100, 1)
    async with http.get("/metrics", headers={"Accept-Encoding": "gzip"}) as r:
        assert r.status == 200 and r.headers["Content-Encoding"] == "gzip"
        text = await r.text()  # aiohttp inflates it
    assert 'kompakt_topic_bytes_in_total{topic="topic-199"} 100.0' in text
    async with http.get("/metrics", headers={"Accept-Encoding": "identity"}) as r:
        assert "Content-Encoding" not in r.headers


async def test_a_console_error_page_says_its_error_once(served):
    """The console's error page (console/templates/error.html) under base.html, which already draws
    the page's `error`: one alert, not the same message twice."""
    _, _, http = served
    async with http.get("/console/broker") as r:             # no logs loaded yet: a 503 page
        assert r.status == 503
        assert (await r.text()).count('role="alert"') == 1
