"""`kompakt topic` / `kompakt group` over TLS and SASL listeners (--command-config), against a broker
process with one listener per security protocol (security_support.security_broker): SSL,
SASL_PLAINTEXT with PLAIN, SASL_SSL with SCRAM-SHA-512, and mutual TLS. Each creates a topic that
confluent-kafka then sees; a wrong password is SASL_AUTHENTICATION_FAILED, an untrusted
certificate or a plaintext client on a TLS port a one-line failure, exit 2.
"""
from __future__ import annotations

import contextlib
import io

import pytest

from kompakt.cli import main
from security_support import security_broker

PROPERTIES = {
    "ssl": lambda ep: {"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": ep.ca},
    "sasl_plain": lambda ep: {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                              "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
                                                  f'required username="{ep.username}" password="{ep.password}";'},
    "sasl_ssl_scram": lambda ep: {"security.protocol": "SASL_SSL", "ssl.ca.location": ep.ca,
                                  "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": ep.username,
                                  "sasl.password": ep.password},
    "mtls": lambda ep: {"security.protocol": "SSL", "ssl.ca.location": ep.ca,
                        "ssl.certificate.location": ep.cert, "ssl.key.location": ep.key},
}


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    with security_broker(tmp_path_factory.mktemp("cli-security")) as (proc, pki, ports, endpoints):
        yield proc, pki, endpoints


def write_properties(path, props: dict) -> str:
    path.write_text("# written by the test\n" + "".join(f"{k}={v}\n" for k, v in props.items()))
    return str(path)


def kompakt(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    assert "Traceback" not in err.getvalue()
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("way", sorted(PROPERTIES))
def test_topics_and_groups_over_each_security_protocol(secured, tmp_path, way):
    proc, _, endpoints = secured
    ep = endpoints[way]
    config = write_properties(tmp_path / "client.properties", PROPERTIES[way](ep))
    topic = f"secured-{way}"
    code, out, err = kompakt("topic", "create", topic, "--partitions", "2", "--config", "cleanup.policy=compact",
                             "--bootstrap", ep.bootstrap, "--command-config", config)
    assert (code, out, err) == (0, f"Created topic {topic}.\n", "")
    from confluent_kafka.admin import AdminClient
    seen = AdminClient({"bootstrap.servers": proc.bootstrap}).list_topics(topic, timeout=30).topics[topic]
    assert seen.error is None and len(seen.partitions) == 2
    code, out, err = kompakt("group", "list", "--bootstrap", ep.bootstrap, "--command-config", config)
    assert code == 0 and out.startswith("GROUP"), err


@pytest.mark.parametrize("way, password", [("sasl_plain", "wrong"), ("sasl_ssl_scram", "wrong")])
def test_a_wrong_password_is_sasl_authentication_failed(secured, tmp_path, way, password):
    _, _, endpoints = secured
    ep = endpoints[way]
    props = PROPERTIES[way](ep)
    props = {k: v.replace(f'password="{ep.password}"', f'password="{password}"') if k == "sasl.jaas.config"
             else (password if k == "sasl.password" else v) for k, v in props.items()}
    config = write_properties(tmp_path / "client.properties", props)
    code, out, err = kompakt("topic", "list", "--bootstrap", ep.bootstrap, "--command-config", config)
    assert code == 1 and out == "" and len(err.splitlines()) == 1
    assert ": SASL_AUTHENTICATION_FAILED: " in err, err


def test_tls_failures_and_bad_settings_exit_2_in_one_line(secured, tmp_path):
    _, pki, endpoints = secured
    ep = endpoints["ssl"]
    untrusting = write_properties(tmp_path / "no-ca.properties", {"security.protocol": "SSL"})
    code, _, err = kompakt("topic", "list", "--bootstrap", ep.bootstrap, "--command-config", untrusting)
    assert code == 2 and len(err.splitlines()) == 1 and "TLS with 127.0.0.1:" in err and "CERTIFICATE_VERIFY_FAILED" in err

    code, _, err = kompakt("topic", "list", "--bootstrap", ep.bootstrap)          # plaintext on a TLS port
    assert code == 2 and len(err.splitlines()) == 1 and "--command-config" in err, err

    jks = write_properties(tmp_path / "jks.properties", {"security.protocol": "SSL", "ssl.truststore.type": "JKS",
                                                         "ssl.truststore.location": pki.ca_file})
    code, _, err = kompakt("topic", "list", "--bootstrap", ep.bootstrap, "--command-config", jks)
    assert code == 2 and "PEM files only" in err

    gssapi = write_properties(tmp_path / "gssapi.properties", {"security.protocol": "SASL_PLAINTEXT"})
    code, _, err = kompakt("topic", "list", "--bootstrap", endpoints["sasl_plain"].bootstrap, "--command-config", gssapi)
    assert code == 2 and "sasl.mechanism=GSSAPI" in err
