"""The admin API's access rules (admin/auth.py) through real HTTP: 401 without the token for
state-changing calls, open reads unless protected, refusal to listen beyond loopback without a
token, HTTPS with the broker's PEM keys, and the `kompakt admin` client sending the token."""
from __future__ import annotations

import ssl
from urllib.parse import unquote

import aiohttp
import pytest

from kompakt.broker.admin.app import start_admin, stop_admin
from kompakt.broker.admin.auth import is_loopback
from kompakt.config.broker_config import ConfigError

from test_admin import bare_broker

TOKEN = "s3cr3t-t0ken"


@pytest.fixture
async def guarded():
    handle = await start_admin(bare_broker(**{"admin.api.token": TOKEN}), port=0)
    yield handle
    await stop_admin(handle)


async def test_state_changing_calls_need_the_token(guarded):
    async with aiohttp.ClientSession(guarded.url) as http:
        async with http.post("/v1/partitions/t/0/pause") as r:
            assert r.status == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
            assert (await r.json())["error"] == "unauthorized"
        async with http.post("/v1/partitions/t/0/pause", headers={"Authorization": "Bearer wrong"}) as r:
            assert r.status == 401
        async with http.post("/v1/partitions/t/0/pause", headers={"Authorization": f"Bearer {TOKEN}"}) as r:
            assert r.status != 401                     # past the gate (no log manager here: 5xx/404)
        for path in ("/metrics", "/health", "/ready", "/v1/partitions"):
            async with http.get(path) as r:
                assert r.status != 401, path


async def test_reads_protected_when_configured():
    handle = await start_admin(bare_broker(**{"admin.api.token": TOKEN,
                                              "admin.api.token.required.for.reads": "true"}), port=0)
    try:
        async with aiohttp.ClientSession(handle.url) as http:
            async with http.get("/metrics") as r:
                assert r.status == 401
            async with http.get("/health", headers={"Authorization": f"Bearer {TOKEN}"}) as r:
                assert r.status == 200
    finally:
        await stop_admin(handle)


async def test_token_file_and_exposure(tmp_path):
    with pytest.raises(ConfigError, match="without a token"):
        start_admin(bare_broker(**{"metrics.host": "0.0.0.0"}), port=0)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    handle = start_admin(bare_broker(**{"metrics.host": "0.0.0.0", "admin.api.token.file": str(token_file)}), port=0)
    await handle
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{handle.port}") as http:
            async with http.post("/v1/partitions/t/0/resume") as r:
                assert r.status == 401
    finally:
        await stop_admin(handle)
    assert is_loopback("127.0.0.2") and is_loopback("::1") and not is_loopback("10.0.0.1")


async def test_https_with_the_broker_keys(tmp_path):
    import trustme
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    handle = await start_admin(bare_broker(**{"admin.api.ssl.enabled": "true", "ssl.keystore.type": "PEM",
                                              "ssl.keystore.location": str(tmp_path / "server.pem")}), port=0)
    try:
        assert handle.url.startswith("https://")
        ctx = ssl.create_default_context()
        ca.configure_trust(ctx)
        async with aiohttp.ClientSession(handle.url) as http:
            async with http.get("/health", ssl=ctx) as r:
                assert r.status == 200
    finally:
        await stop_admin(handle)


async def test_console_signs_in_with_the_token_and_keeps_the_api_rule():
    """The web console under protected reads: pages send the browser to the sign-in page, the
    sign-in sets a same-site HTTP-only cookie only for the right token, the cookie opens /console
    but never the API (which still wants the header), and a form from another origin is refused."""
    handle = await start_admin(bare_broker(**{"admin.api.token": TOKEN,
                                              "admin.api.token.required.for.reads": "true"}), port=0)
    try:   # unsafe=True: keep cookies of an IP address host (aiohttp's jar drops them by default)
        async with aiohttp.ClientSession(handle.url, cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            async with http.get("/console/broker", allow_redirects=False) as r:
                assert r.status == 303 and unquote(r.headers["Location"]) == "/console/login?next=/console/broker"
            async with http.get("/console/static/console.css") as r:
                assert r.status == 200                       # the sign-in page needs its style
            async with http.post("/console/login", data={"token": "wrong", "next": "/console/broker"},
                                 allow_redirects=False) as r:
                assert r.status == 401 and "kompakt_admin_token" not in r.cookies
            async with http.post("/console/login", data={"token": TOKEN, "next": "https://evil.example/"},
                                 allow_redirects=False) as r:
                assert r.status == 303 and r.headers["Location"] == "/console/broker"   # no open redirect
                cookie = r.headers["Set-Cookie"]
                assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/console" in cookie
            async with http.get("/console/broker", allow_redirects=False) as r:
                assert r.status != 303                       # signed in (no log manager here: 503 page)
            http.cookie_jar.update_cookies({"kompakt_admin_token": TOKEN})
            async with http.get("/v1/partitions") as r:
                assert r.status == 401                       # the API's rule is the header, not the cookie
            async with http.post("/console/topics", data={"name": "x"}, allow_redirects=False,
                                 headers={"Origin": "http://elsewhere.example"}) as r:
                assert r.status == 403 and "refused" in await r.text()
    finally:
        await stop_admin(handle)


async def test_the_record_browser_needs_the_token_even_with_open_reads(guarded):
    """Reads stay open with a token set, but records are data, not metadata: the console's record
    browser (page and JSON) asks for the token as a change does, so a broker listening beyond
    loopback (allowed once a token is set) does not hand every record to anyone who reaches it,
    past the Kafka listeners' SASL and ACLs."""
    async with aiohttp.ClientSession(guarded.url, cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        async with http.get("/console/topics/orders/records", allow_redirects=False) as r:
            assert r.status == 303 and r.headers["Location"].startswith("/console/login?next=")
        for path in ("/console/topics/orders/records.json", "/console/topics/orders/records?_format=json&partition=0"):
            async with http.get(path, allow_redirects=False) as r:   # a script: the API's 401, not HTML
                assert r.status == 401 and (await r.json())["error"] == "unauthorized", path
                assert r.headers["WWW-Authenticate"].startswith("Bearer")
        async with http.get("/console/topics/orders/records", allow_redirects=False,
                            headers={"Accept": "application/json"}) as r:
            assert r.status == 401
        async with http.get("/console/topics/orders/records", allow_redirects=False,
                            headers={"Authorization": f"Bearer {TOKEN}"}) as r:
            assert r.status != 303                            # past the gate (no log manager here)
        http.cookie_jar.update_cookies({"kompakt_admin_token": TOKEN})
        async with http.get("/console/topics/orders/records", allow_redirects=False) as r:
            assert r.status != 303
        async with http.get("/console/topics", allow_redirects=False) as r:
            assert r.status != 303                            # other pages keep the API's read rule


async def test_a_tokenless_api_refuses_other_sites_and_foreign_host_names():
    """Without a token the API trusts whoever reaches its loopback port, so it must not be a web
    page's: a POST whose Origin is another site (a form or a no-cors fetch needs no preflight) is
    refused on /v1 as on /console, and a request whose Host is not a loopback name (a DNS-rebinding
    page that made evil.example resolve to 127.0.0.1) is refused even for reads."""
    handle = await start_admin(bare_broker(), port=0)
    try:
        async with aiohttp.ClientSession(handle.url) as http:
            async with http.post("/v1/partitions/t/0/pause", headers={"Origin": "http://evil.example"}) as r:
                assert r.status == 403 and "refused" in await r.text()
            async with http.post("/v1/partitions/t/0/pause") as r:
                assert r.status != 403                            # kompakt admin, curl: no Origin
            async with http.post("/v1/partitions/t/0/pause", headers={"Origin": handle.url}) as r:
                assert r.status != 403                            # the console's own page
            for path in ("/v1/partitions", "/console/broker", "/metrics"):
                async with http.get(path, headers={"Host": f"evil.example:{handle.port}"}) as r:
                    assert r.status == 403 and "loopback" in await r.text(), path
            for host in ("localhost", "127.0.0.1", "[::1]"):
                async with http.get("/health", headers={"Host": f"{host}:{handle.port}"}) as r:
                    assert r.status == 200, host
    finally:
        await stop_admin(handle)
    guarded = await start_admin(bare_broker(**{"admin.api.token": TOKEN}), port=0)
    try:   # with a token, a Host name is the operator's business (a proxy, a DNS name)
        async with aiohttp.ClientSession(guarded.url) as http:
            async with http.get("/health", headers={"Host": "kompakt.example.com"}) as r:
                assert r.status == 200
    finally:
        await stop_admin(guarded)


async def test_the_sign_in_page_brings_back_the_page_asked_with_its_query(guarded):
    """A record-browser link (partition, offset) followed without the token comes back to that
    same view after the sign-in, not to partition 0 from the log start."""
    async with aiohttp.ClientSession(guarded.url, cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        asked = "/console/topics/orders/records?partition=2&value=40"
        async with http.get(asked, allow_redirects=False) as r:
            assert r.status == 303
            location = r.headers["Location"]
        assert unquote(location) == f"/console/login?next={asked}"
        async with http.post("/console/login", data={"token": TOKEN, "next": asked}, allow_redirects=False) as r:
            assert r.status == 303 and r.headers["Location"] == asked


def test_wrong_tokens_from_one_address_make_it_wait_longer_each_time():
    """TokenThrottle: three wrong tokens in a row are free (typos), then 1 s, 2 s, 4 s ... up to
    60 s; other addresses are not held back; a right token clears the count; a client quiet for
    15 minutes after its wait starts afresh."""
    from kompakt.broker.admin.auth import MAX_WAIT_S, TokenThrottle
    now = [1000.0]
    throttle = TokenThrottle(clock=lambda: now[0])
    assert [throttle.failed("a") for _ in range(2)] == [0.0, 0.0] and throttle.wait_s("a") == 0
    assert throttle.failed("a") == 1.0 and throttle.wait_s("a") == 1.0 and throttle.wait_s("b") == 0
    now[0] += 0.4
    assert throttle.wait_s("a") == pytest.approx(0.6)
    now[0] += 0.6
    assert throttle.wait_s("a") == 0 and throttle.failed("a") == 2.0 and throttle.failed("a") == 4.0
    assert max(throttle.failed("a") for _ in range(10)) == MAX_WAIT_S
    throttle.succeeded("a")
    assert throttle.wait_s("a") == 0 and throttle.failed("a") == 0.0
    throttle.failed("a"), throttle.failed("a")
    now[0] += 901 + 1
    assert throttle.failed("a") == 0.0                        # forgotten: the first of a new run
