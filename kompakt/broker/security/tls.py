"""TLS server contexts from Kafka's `ssl.*` keys, PEM only (Python's `ssl`, OpenSSL underneath).

Keys (each also per listener as `listener.name.<l>.<key>`, see listeners.py):
  ssl.keystore.type=PEM      with ssl.keystore.location (a PEM file holding the private key and the
                             certificate chain) or ssl.keystore.certificate.chain + ssl.keystore.key
                             (the PEM text itself); ssl.key.password (else ssl.keystore.password)
                             decrypts an encrypted key
  ssl.truststore.type=PEM    with ssl.truststore.location (file) or ssl.truststore.certificates
                             (text): the CAs client certificates must chain to
  ssl.client.auth            none | requested | required (mutual TLS)
  ssl.enabled.protocols      TLSv1.2,TLSv1.3 (the lowest and highest enabled bound the range)
  ssl.cipher.suites          TLS 1.2 suites, IANA names (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256) or
                             OpenSSL names; TLS 1.3 suites are OpenSSL's defaults
A JKS or PKCS12 store is refused at start with a message saying to convert it to PEM; so is a
keystore type left at Kafka's default (JKS) when the file is not PEM.

Handshake failures (garbage instead of a ClientHello, an expired or untrusted client
certificate) close that connection; `LoggedSSLObject` writes the one log line for each, since the
event loop drops them silently.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import ssl
import tempfile

from kompakt.config.broker_config import ConfigError

log = logging.getLogger("kompakt.broker.security.tls")

_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)
_VERSIONS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
             "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_TLS13_SUITES = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
                 "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256"}


class LoggedSSLObject(ssl.SSLObject):
    """Logs a failed server-side handshake once (the loop only closes the socket) and counts it."""
    listener = "?"
    stats = None                 # the listener's Counter (security/setup.py), for metrics

    def do_handshake(self):
        try:
            return super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise
        except (ssl.SSLError, OSError) as exc:
            log.warning("TLS handshake failed on listener %s, connection closed: %s", self.listener,
                        getattr(exc, "reason", None) or exc)
            if self.stats is not None:
                self.stats[("TLS", "failure")] += 1
            raise


def normalize_pem(text: str) -> str:
    """PEM text with its line breaks restored: a value from a properties file may arrive as one
    line (`\\` continuations drop the newlines)."""
    blocks = _PEM_BLOCK.findall(text)
    if not blocks:
        return text
    out = []
    for kind, body in blocks:
        lines = body.strip().splitlines()
        headers = [ln for ln in lines if ":" in ln]          # e.g. Proc-Type of a legacy encrypted key
        b64 = "".join(re.sub(r"\s+", "", ln) for ln in lines if ":" not in ln)
        wrapped = [b64[i:i + 64] for i in range(0, len(b64), 64)]
        sep = [""] if headers else []
        out.append("\n".join([f"-----BEGIN {kind}-----", *headers, *sep, *wrapped, f"-----END {kind}-----"]))
    return "\n".join(out) + "\n"


def _check_pem_store(get, kind: str) -> None:
    store_type = (get(f"ssl.{kind}.type") or "").upper()
    location = get(f"ssl.{kind}.location")
    if store_type in ("JKS", "PKCS12", "JCEKS", "BCFKS"):
        explicit = store_type != "JKS" or not location or not _is_pem_file(location)
        if explicit:
            raise ConfigError(
                f"ssl.{kind}.type={store_type} is not supported: Kompakt reads PEM keys and certificates. "
                f"Convert the store (e.g. `keytool -importkeystore -srckeystore {location or 'store.jks'} "
                f"-destkeystore store.p12 -deststoretype PKCS12` then `openssl pkcs12 -in store.p12 -out "
                f"store.pem`) and set ssl.{kind}.type=PEM")
    elif store_type != "PEM":
        raise ConfigError(f"Invalid value {store_type} for configuration ssl.{kind}.type: use PEM")


def _is_pem_file(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return b"-----BEGIN" in fh.read(1 << 20)
    except OSError:
        return False


@contextlib.contextmanager
def _keystore_files(get):
    """(certificate chain file, key file or None) of the keystore: ssl reads keys and certificates
    only from files, so PEM text goes to a private temp dir, removed as soon as it is read."""
    location = get("ssl.keystore.location")
    chain, key = get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")
    if location:
        if not os.path.isfile(location):
            raise ConfigError(f"ssl.keystore.location {location} does not exist or is not a file")
        yield location, None
    elif chain and key:
        with tempfile.TemporaryDirectory(prefix="kompakt-tls-") as tmp:
            cert_path, key_path = os.path.join(tmp, "chain.pem"), os.path.join(tmp, "key.pem")
            for path, text in ((cert_path, chain), (key_path, key)):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as fh:
                    fh.write(normalize_pem(text))
            yield cert_path, key_path
    else:
        raise ConfigError("a TLS listener needs ssl.keystore.location, or ssl.keystore.certificate.chain "
                          "and ssl.keystore.key (PEM)")


def _load_keystore(ctx: ssl.SSLContext, get) -> None:
    password = get("ssl.key.password") or get("ssl.keystore.password")
    try:
        with _keystore_files(get) as (cert_path, key_path):
            ctx.load_cert_chain(cert_path, key_path, password=password)
    except ssl.SSLError as exc:
        raise ConfigError(f"cannot load the TLS key and certificate chain: {exc.reason or exc} (PEM expected; "
                          f"a wrong or missing ssl.key.password also ends here)") from None


def keystore_identity(get) -> tuple[str, list[str]]:
    """(subject DN, sorted SubjectAltNames) of the keystore's own (first) certificate, what
    Kafka compares when a keystore is replaced at run time (ssl.allow.dn.changes /
    ssl.allow.san.changes). Call after server_context accepted the same keys."""
    try:
        with _keystore_files(get) as (cert_path, _key):
            # the stdlib's decoder of a PEM certificate file (what getpeercert() returns); the
            # first certificate of the file is the one the server presents
            decoded = ssl._ssl._test_decode_cert(cert_path)  # noqa: SLF001 - no public decoder in ssl
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"cannot read the keystore's certificate: {exc}") from None
    subject = ",".join("+".join(f"{k}={v}" for k, v in rdn) for rdn in reversed(decoded.get("subject", ())))
    sans = sorted(f"{kind}:{value}" for kind, value in decoded.get("subjectAltName", ()))
    return subject, sans


def _load_truststore(ctx: ssl.SSLContext, get) -> bool:
    location, certs = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    try:
        if location:
            ctx.load_verify_locations(cafile=location)
        elif certs:
            ctx.load_verify_locations(cadata=normalize_pem(certs))
        else:
            return False
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"cannot load the TLS truststore: {exc} (PEM CA certificates expected)") from None
    return True


def openssl_cipher_name(name: str) -> str:
    """IANA (Java) TLS 1.2 suite name -> OpenSSL's (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 ->
    ECDHE-RSA-AES128-GCM-SHA256); other names pass through."""
    m = re.fullmatch(r"TLS_(\w+?)_WITH_(\w+)", name)
    if m is None:
        return name
    kx, cipher = m.group(1), m.group(2)
    cipher = re.sub(r"AES_(\d+)", r"AES\1", cipher).replace("CHACHA20_POLY1305_SHA256", "CHACHA20_POLY1305")
    prefix = {"RSA": ""}.get(kx, kx.replace("_", "-") + "-")
    return prefix + cipher.replace("_", "-")


def server_context(get, listener: str, stats=None) -> ssl.SSLContext:
    """An SSLContext for a TLS listener (or the admin API); `get(key)` reads configuration."""
    _check_pem_store(get, "keystore")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    enabled = [v for v in get("ssl.enabled.protocols") if v in _VERSIONS]
    if not enabled:
        raise ConfigError("ssl.enabled.protocols names no TLS version Kompakt supports (TLSv1.2, TLSv1.3)")
    ordered = sorted(enabled, key=lambda v: _VERSIONS[v])
    try:
        ctx.minimum_version, ctx.maximum_version = _VERSIONS[ordered[0]], _VERSIONS[ordered[-1]]
    except ValueError as exc:
        raise ConfigError(f"ssl.enabled.protocols {enabled}: {exc}") from None
    named = get("ssl.cipher.suites")
    tls13 = [s for s in named if s in _TLS13_SUITES]
    if tls13:          # Python's ssl has no set_ciphersuites: say so rather than seem to obey
        log.warning("listener %s: ssl.cipher.suites names TLS 1.3 suites (%s), which Kompakt cannot restrict: "
                    "TLS 1.3 connections use OpenSSL's default suites; the TLS 1.2 ones listed are applied",
                    listener, ", ".join(tls13))
    suites = [s for s in named if s not in _TLS13_SUITES]
    if suites:
        try:
            ctx.set_ciphers(":".join(openssl_cipher_name(s) for s in suites))
        except ssl.SSLError:
            raise ConfigError(f"ssl.cipher.suites {suites}: OpenSSL knows none of these suites") from None
    _load_keystore(ctx, get)
    auth = get("ssl.client.auth")
    if auth != "none":
        if (get("ssl.truststore.location") or get("ssl.truststore.certificates")):
            _check_pem_store(get, "truststore")
        if not _load_truststore(ctx, get):
            raise ConfigError(f"ssl.client.auth={auth} needs a truststore: set ssl.truststore.location "
                              f"(or ssl.truststore.certificates) to the PEM CA certificates of your clients")
        ctx.verify_mode = ssl.CERT_REQUIRED if auth == "required" else ssl.CERT_OPTIONAL
    # Tickets resume sessions without a full handshake, as the JDK does by default. No TLS 1.2
    # renegotiation (no Kafka client asks for one): mid-stream it would make a write wait for a
    # read, which our TLS layer (network/tls_transport.py) does not expect of an encryption.
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    ctx.sslobject_class = type("LoggedSSLObject_" + listener, (LoggedSSLObject,),
                               {"listener": listener, "stats": stats})
    return ctx
