"""Principals from TLS client certificates: the subject as Java's X500Principal.getName() writes
it (RFC 2253), then `ssl.principal.mapping.rules` (Kafka's SslPrincipalMapper).

Rules, comma separated, tried in order; the first that yields a name wins:
    DEFAULT                        the distinguished name itself (`CN=alice,OU=eng,O=acme`)
    RULE:<regex>/<replacement>/    if <regex> matches the *whole* name: the name with every match
                                   of <regex> replaced (Java's replaceAll; `$1` group references,
                                   a reference past the pattern's groups is literal text, as
                                   Kafka's escapeLiteralBackReferences makes it; `\\x` is x); a
                                   trailing `L` or `U` lower- or upper-cases the result
                                   (RULE:^CN=(.*?),.*$/$1/L)
No rule matching is an authentication failure (Kafka's NoMatchingRule). A rule yielding an empty
name is one too (Kafka would go on with the principal `User:`, which no ACL can name). The
principal is `User:<result>`; a connection without a client certificate is User:ANONYMOUS.

The subject comes from the certificate's DER bytes, so the string is Java's, byte for byte:
RDNs last first, joined by `,` (the values of a multi-valued RDN by `+`, in encoded order); the
types CN, C, L, ST, O, OU, STREET, DC, UID by name with their string value, every other type as
its dotted OID with `#` and the lower-case hex of the value's DER encoding (an e-mail address:
`1.2.840.113549.1.9.1=#16...`); in values, `,=+<>#;"\\` are escaped with `\\`, NUL is `\\00`, and
leading and trailing spaces are escaped one by one.

DER read here (ITU-T X.690; lengths short or long form):
    Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version OPTIONAL, serialNumber
        INTEGER, signature SEQUENCE, issuer Name, validity SEQUENCE, subject Name, ... }, ... }
    Name ::= SEQUENCE OF SET OF SEQUENCE { type OBJECT IDENTIFIER, value ANY }
"""
from __future__ import annotations

import re

from kompakt.config.broker_config import ConfigError

RFC2253_KEYWORDS = {
    "2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O", "2.5.4.11": "OU",
    "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID",
}
# DER string types Java writes as text (AVA.isDerString, non-canonical): UTF8String,
# PrintableString, T61String, IA5String, GeneralString, BMPString
_STRING_TAGS = frozenset({0x0C, 0x13, 0x14, 0x16, 0x1B, 0x1E})
_SEQUENCE, _SET, _OID, _VERSION = 0x30, 0x31, 0x06, 0xA0
_ESCAPED = set(',=+<>#;"\\')
_RULE = re.compile(r"\s*(DEFAULT|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:,\s*|$)")


class NoMatchingRule(Exception):
    pass


class BadCertificate(ValueError):
    pass


def _tlv(data: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, start of the value, end of the value) of the DER element at `pos`."""
    if pos + 2 > len(data):
        raise BadCertificate("truncated DER element")
    tag, n = data[pos], data[pos + 1]
    pos += 2
    if n & 0x80:
        k = n & 0x7F
        if k == 0 or k > 4 or pos + k > len(data):
            raise BadCertificate("bad DER length")
        n = int.from_bytes(data[pos:pos + k], "big")
        pos += k
    if pos + n > len(data):
        raise BadCertificate("DER element past its container")
    return tag, pos, pos + n


def _children(data: bytes, start: int, end: int):
    while start < end:
        tag, vstart, vend = _tlv(data, start)
        yield tag, start, vstart, vend
        start = vend


def _oid(body: bytes) -> str:
    values, n = [], 0
    for byte in body:
        n = (n << 7) | (byte & 0x7F)
        if not byte & 0x80:
            values.append(n)
            n = 0
    if not values:
        raise BadCertificate("empty OID")
    first = values[0]
    head = [first // 40, first % 40] if first < 80 else [2, first - 80]
    return ".".join(str(v) for v in head + values[1:])


def _value_text(value: str) -> str:
    """Java's RFC 2253 escaping of an attribute's string value."""
    out = []
    for ch in value:
        if ch in _ESCAPED:
            out.append("\\" + ch)
        elif ch == "\0":
            out.append("\\00")
        else:
            out.append(ch)
    lead = 0
    while lead < len(out) and out[lead] in (" ", "\r"):
        lead += 1
    trail = len(out)
    while trail > lead and out[trail - 1] in (" ", "\r"):
        trail -= 1
    return "".join("\\" + c if i < lead or i >= trail else c for i, c in enumerate(out))


def subject_dn(der: bytes) -> str:
    """The subject of a DER certificate as Java's X500Principal.getName() (see the docstring)."""
    tag, start, end = _tlv(der, 0)
    if tag != _SEQUENCE:
        raise BadCertificate("not a certificate")
    tag, start, end = _tlv(der, start)                       # tbsCertificate
    fields = list(_children(der, start, end))
    if fields and fields[0][0] == _VERSION:
        fields = fields[1:]
    if len(fields) < 5 or fields[4][0] != _SEQUENCE:
        raise BadCertificate("no subject")
    rdns = []
    for set_tag, _, set_start, set_end in _children(der, fields[4][2], fields[4][3]):
        if set_tag != _SET:
            raise BadCertificate("RDN is not a SET")
        avas = []
        for seq_tag, _, seq_start, seq_end in _children(der, set_start, set_end):
            parts = list(_children(der, seq_start, seq_end))
            if seq_tag != _SEQUENCE or len(parts) != 2 or parts[0][0] != _OID:
                raise BadCertificate("bad attribute")
            (_, _, oid_start, oid_end), (vtag, vpos, vstart, vend) = parts
            oid = _oid(der[oid_start:oid_end])
            keyword = RFC2253_KEYWORDS.get(oid)
            if keyword is not None and vtag in _STRING_TAGS:
                avas.append(keyword + "=" + _value_text(der[vstart:vend].decode("utf-8", "replace")))
            else:
                avas.append((keyword or oid) + "=#" + der[vpos:vend].hex())
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


def _java_replacement(replacement: str, groups: int):
    """A function for re.sub doing what Java's Matcher.replaceAll does with `replacement` after
    Kafka's escapeLiteralBackReferences: `\\x` is x; `$` and digits refer to the longest prefix of
    the digits naming a group (`$0` the whole match), the other digits being text; a `$n` past
    the pattern's groups is the text `$n`."""
    pieces: list[str | int] = []
    i = 0
    while i < len(replacement):
        ch = replacement[i]
        if ch == "\\" and i + 1 < len(replacement):
            pieces.append(replacement[i + 1])
            i += 2
            continue
        if ch == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            j = i + 1
            while j < len(replacement) and replacement[j].isdigit():
                j += 1
            digits = replacement[i + 1:j]
            ref = None
            for k in range(len(digits), 0, -1):
                if int(digits[:k]) <= groups or (k == 1 and digits[0] == "0"):
                    ref = k
                    break
            if ref is None:
                if groups == 0:
                    raise ConfigError(f"Invalid rule replacement {replacement!r} in ssl.principal.mapping.rules: "
                                      f"${digits} refers to a group, and the pattern has none")
                pieces.append("$" + digits)
            else:
                pieces.append(int(digits[:ref]))
                pieces.append(digits[ref:])
            i = j
            continue
        pieces.append(ch)
        i += 1

    def expand(m: re.Match) -> str:
        return "".join(p if isinstance(p, str) else (m.group(p) or "") for p in pieces)
    return expand


class PrincipalMapper:
    def __init__(self, rules: str | None):
        self.rules: list[tuple[re.Pattern, object, str] | None] = []   # None = DEFAULT
        text = (rules or "DEFAULT").strip()
        pos = 0
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise ConfigError(f"Invalid rule: {text[pos:]!r} in ssl.principal.mapping.rules "
                                  f"(expected DEFAULT or RULE:pattern/replacement/[LU], comma separated)")
            pos = m.end()
            if m.group(1) == "DEFAULT":
                self.rules.append(None)
                continue
            try:
                pattern = re.compile(m.group(2))
            except re.error as exc:
                raise ConfigError(f"Invalid rule pattern {m.group(2)!r} in ssl.principal.mapping.rules: {exc}") from None
            self.rules.append((pattern, _java_replacement(m.group(3), pattern.groups), m.group(4)))

    def name_for(self, dn: str) -> str:
        for rule in self.rules:
            if rule is None:
                return dn
            pattern, replacement, case = rule
            if pattern.fullmatch(dn) is None:
                continue
            name = pattern.sub(replacement, dn)
            name = name.lower() if case == "L" else name.upper() if case == "U" else name
            if not name:
                break
            return name
        raise NoMatchingRule(f"No rule of ssl.principal.mapping.rules applies to {dn}")
