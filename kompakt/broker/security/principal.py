"""Principals from TLS client certificates: the subject as an RFC 2253 name, then
`ssl.principal.mapping.rules` (Kafka's SslPrincipalMapper).

Rules, comma or newline separated, tried in order, the first that matches wins:
    DEFAULT                        the distinguished name itself (`CN=alice,OU=eng,O=acme`)
    RULE:<regex>/<replacement>/    if <regex> matches the *whole* name: the replacement, with
                                   Java's `$1` group references; a trailing `L` or `U` lower- or
                                   upper-cases the result (RULE:^CN=(.*?),.*$/$1/L)
No rule matching is an authentication failure (Kafka's NoMatchingRule), as is an empty result.
The principal is `User:<result>`; a connection without a client certificate is User:ANONYMOUS.

The subject's attributes are written in RFC 2253 order (last RDN first) with the short names
Java's X500Principal uses (CN, OU, O, L, ST, C, STREET, DC, UID; emailAddress as EMAILADDRESS)
and RFC 2253 escaping of `,+"\\<>;` and a leading `#` or space.
"""
from __future__ import annotations

import re

from kompakt.config.broker_config import ConfigError

SHORT_NAMES = {
    "commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O", "localityName": "L",
    "stateOrProvinceName": "ST", "countryName": "C", "streetAddress": "STREET", "domainComponent": "DC",
    "userId": "UID", "emailAddress": "EMAILADDRESS",
}
_RULE = re.compile(r"\s*(DEFAULT|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)[^,\n]*?)\s*(?:[,\n]\s*|$)")
_JAVA_GROUP = re.compile(r"\$(\d+)")


class NoMatchingRule(Exception):
    pass


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out


def subject_dn(peercert: dict) -> str:
    """RFC 2253 string of `SSLSocket.getpeercert()`'s subject."""
    rdns = []
    for rdn in reversed(peercert.get("subject", ())):
        rdns.append("+".join(f"{SHORT_NAMES.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


class PrincipalMapper:
    def __init__(self, rules: str | None):
        self.rules: list[tuple[re.Pattern, str, str] | None] = []   # None = DEFAULT
        text = (rules or "DEFAULT").strip()
        pos = 0
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise ConfigError(f"Invalid rule: {text[pos:]!r} in ssl.principal.mapping.rules "
                                  f"(expected DEFAULT or RULE:pattern/replacement/[LU])")
            pos = m.end()
            if m.group(1) == "DEFAULT":
                self.rules.append(None)
            else:
                try:
                    pattern = re.compile(m.group(2))
                except re.error as exc:
                    raise ConfigError(f"Invalid rule pattern {m.group(2)!r} in ssl.principal.mapping.rules: {exc}") from None
                self.rules.append((pattern, _JAVA_GROUP.sub(r"\\g<\1>", m.group(3)), m.group(4)))

    def name_for(self, dn: str) -> str:
        for rule in self.rules:
            if rule is None:
                return dn
            pattern, replacement, case = rule
            m = pattern.fullmatch(dn)
            if m is None:
                continue
            name = m.expand(replacement)
            name = name.lower() if case == "L" else name.upper() if case == "U" else name
            if not name:
                break
            return name
        raise NoMatchingRule(f"No rule of ssl.principal.mapping.rules applies to {dn}")
