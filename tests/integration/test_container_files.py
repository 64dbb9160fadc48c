"""The files the image and compose stack ship, checked without a container engine: the baked
server.properties loads with no ignored key and binds every interface; compose.yml wires Kompakt,
Prometheus and Grafana to files that exist; Prometheus's config passes `promtool check config`; the
Grafana dashboard uses the provisioned datasource. (Queries of the dashboard run against a real
Prometheus in test_prometheus.py; the image itself runs in test_container.py.)"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import yaml

from kompakt.config.broker_config import BrokerConfig

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def test_baked_server_properties_bind_all_interfaces():
    cfg = BrokerConfig.load(str(DOCKER / "server.properties"), environ={})
    assert cfg.ignored == []
    assert cfg["listeners"] == ["PLAINTEXT://0.0.0.0:9092"]
    assert cfg["metrics.host"] == "0.0.0.0" and cfg["metrics.port"] == 9644
    assert cfg.log_dirs == ["/var/lib/kompakt/data"]
    # the environment wins over the file, as the Dockerfile and docs promise
    env = {"KOMPAKT_ADVERTISED_LISTENERS": "PLAINTEXT://broker.example:9092"}
    assert BrokerConfig.load(str(DOCKER / "server.properties"), environ=env)["advertised.listeners"] == \
        ["PLAINTEXT://broker.example:9092"]


def test_dockerfile_contract():
    text = (DOCKER / "Dockerfile").read_text()
    for needle in ("ARG BASE=python:3.11-slim-bookworm", "EXPOSE 9092 9644", "HEALTHCHECK", "USER 10001",
                   'VOLUME ["/var/lib/kompakt/data"]', "KOMPAKT_CONFIG=/etc/kompakt/server.properties"):
        assert needle in text, needle
    assert text.count("\nFROM ") >= 2, "multi-stage build"


def test_prometheus_config_is_valid():
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: apt-get install prometheus (scripts/test.sh does)"
    result = subprocess.run([promtool, "check", "config", str(DOCKER / "prometheus.yml")],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_and_grafana_provisioning():
    compose = yaml.safe_load((DOCKER / "compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"kompakt", "prometheus", "grafana"}
    assert services["kompakt"]["build"] == {"context": "..", "dockerfile": "docker/Dockerfile"}
    assert {"9092:9092", "9644:9644"} <= set(services["kompakt"]["ports"])
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (DOCKER / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in compose["volumes"], f"{name} uses undeclared volume {source}"
    scrape = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    targets = [t for job in scrape["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    assert targets == ["kompakt:9644"]

    datasource = yaml.safe_load((DOCKER / "grafana/provisioning/datasources/prometheus.yml").read_text())
    uid = datasource["datasources"][0]["uid"]
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"
    dashboards = yaml.safe_load((DOCKER / "grafana/provisioning/dashboards/kompakt.yml").read_text())
    assert dashboards["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    assert "./grafana/dashboards:/var/lib/grafana/dashboards:ro" in services["grafana"]["volumes"]

    dash = json.loads((DOCKER / "grafana/dashboards/kompakt.json").read_text())
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    titles = " ".join(p["title"].lower() for p in dash["panels"])
    for section in ("throughput", "latency", "log size", "cleaner"):
        assert section in titles, section
    for panel in dash["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == uid, panel["title"]
            assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]


def test_sasl_ssl_overlay_starts_a_secured_broker(tmp_path):
    """compose.sasl-ssl.yml's settings over the baked file build a SASL_SSL listener with SCRAM and
    PLAIN, the authorizer, and a token-guarded admin API (certificate swapped for a test one)."""
    import trustme
    from kompakt.broker.admin.auth import admin_token, check_exposure
    from kompakt.broker.security.setup import build_authorizer, build_listeners
    base = yaml.safe_load((DOCKER / "compose.yml").read_text())["services"]["kompakt"]["environment"]
    overlay = yaml.safe_load((DOCKER / "compose.sasl-ssl.yml").read_text())["services"]
    assert overlay["kompakt"]["depends_on"]["certs"]["condition"] == "service_completed_successfully"
    pem = tmp_path / "server.pem"
    trustme.CA().issue_cert("localhost").private_key_and_cert_chain_pem.write_to_path(str(pem))
    args = overlay["kompakt"]["command"]
    assert not any("password" in a for a in args)   # secrets in the environment, not in `ps`
    overrides = [v.replace("/etc/kompakt/certs/server.pem", str(pem)) for k, v in zip(args[::2], args[1::2])]
    env = {k: v.replace("${KOMPAKT_ADMIN_API_TOKEN:-change-me-kompakt-admin}", "t")
           for k, v in {**base, **overlay["kompakt"]["environment"]}.items()}
    cfg = BrokerConfig.load(str(DOCKER / "server.properties"), overrides, environ=env)
    cfg.set("log.dirs", str(tmp_path / "data"))
    listeners = {sec.name: sec for sec in build_listeners(cfg)}
    sasl_ssl = listeners["SASL_SSL"]
    assert sasl_ssl.ssl_context is not None and sasl_ssl.sasl.mechanisms == ["SCRAM-SHA-512", "PLAIN"]
    assert set(sasl_ssl.sasl.plain_users) == {"admin"}
    assert build_authorizer(cfg).super_users == {"User:admin"}
    check_exposure(cfg["metrics.host"], admin_token(cfg))          # 0.0.0.0 with a token: allowed
