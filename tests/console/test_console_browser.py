"""The web console in a real browser: Debian's Chromium, headless, driven by Playwright.

One `kompakt serve` process for the module, filled by real clients (confluent-kafka): a compacted
topic with keys, JSON values, headers and tombstones, a delete-policy topic, a committed and an
aborted transaction, a classic consumer group and a KIP-848 one (`group.protocol=consumer`), and a
clean run by `kompakt admin compact`. One Chromium for the module. Each test drives the pages as a
person does (goto, fill, select, click) and checks what the page shows against what the clients
wrote or what a Kafka admin client reads back; each page's screenshot goes to the test's tmp dir
(KOMPAKT_CONSOLE_SHOTS=dir copies them there too: docs/img is made that way).
"""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from playwright.sync_api import expect, sync_playwright

from kompakt.testing.broker import SUBPROCESS, start_broker

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ORDERS, EVENTS, PRICES = "orders", "events", "prices"
PRICE_ROUNDS = 14
TOKEN = "console-test-token"
KEYS = 20
BROKER_TZ = "Asia/Kolkata"            # UTC+05:30, no daylight saving
DELETE_ROUNDS = 20


def _produce(bootstrap: str) -> dict:
    """What the clients write; returns the facts the tests compare pages with."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    t0 = int(time.time() * 1000)
    for round_ in range(3):                       # every key three times: the cleaner has work
        for k in range(KEYS):
            p.produce(ORDERS, key=f"order-{k}", partition=0,
                      value=json.dumps({"order": k, "round": round_, "total": 10 * k + round_}),
                      headers=[("source", b"console-test")])
        p.flush(10)
    for k in range(3):                            # tombstones, held back for the billing group
        p.produce(ORDERS, key=f"order-{k}", value=None, partition=0)
    for i in range(5):
        p.produce(EVENTS, key=None, value=f"event {i}", partition=0)
    p.flush(10)
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": "payments-tx"})
    tx.init_transactions(10)
    tx.begin_transaction()
    tx.produce(EVENTS, value="committed in a transaction", partition=0)
    tx.commit_transaction(10)
    tx.begin_transaction()
    tx.produce(EVENTS, value="aborted in a transaction", partition=0)
    tx.flush(10)
    tx.abort_transaction(10)
    return {"t0": t0}


def _prices(bootstrap: str) -> None:
    """Rounds of the same keys a quarter second apart into a topic rolled every 100 ms: each round a
    new segment, so the cleaner (min.cleanable.dirty.ratio=0.6) cleans it by itself now and again:
    passes on the timeline and a dirty ratio that rises and falls."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for round_ in range(PRICE_ROUNDS):
        for k in range(30):
            p.produce(PRICES, key=f"EUR{k:02d}", value=f"{1.0 + k / 100 + round_ / 1000:.4f}", partition=0)
        p.flush(10)
        time.sleep(0.25)


def _consume(bootstrap: str, group: str, protocol: str, topic: str, n: int) -> None:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    if protocol == "consumer":
        conf["group.protocol"] = "consumer"
    c = Consumer(conf)
    c.subscribe([topic])
    got, deadline = 0, time.monotonic() + 30
    while got < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got += 1
            if got == n:
                c.commit(message=m, asynchronous=False)
    c.close()
    assert got == n, f"{group} read {got} of {n}"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("console")
    # the broker runs in a time zone far from UTC: the pages must not show its local time
    zone, os.environ["TZ"] = os.environ.get("TZ"), BROKER_TZ
    try:
        broker = start_broker(str(base / "data"), mode=SUBPROCESS, config={"log.cleaner.backoff.ms": "300",
                                                                           "admin.api.token": TOKEN})
    finally:
        if zone is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = zone
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([
        NewTopic(ORDERS, 2, 1, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
                                        "kompakt.tombstone.retention.groups": "billing"}),
        NewTopic(EVENTS, 1, 1),
        NewTopic(PRICES, 1, 1, config={"cleanup.policy": "compact", "segment.ms": "100",
                                       "min.cleanable.dirty.ratio": "0.6"})])
    for f in futures.values():
        f.result(30)
    prices = threading.Thread(target=_prices, args=(broker.bootstrap,))
    prices.start()
    facts = _produce(broker.bootstrap)
    _consume(broker.bootstrap, "billing", "classic", ORDERS, 30)          # stops part way: lag
    _consume(broker.bootstrap, "audit", "consumer", EVENTS, 6)
    prices.join(60)
    # the clean, as an operator runs it
    out = subprocess.run([sys.executable, "-m", "kompakt", "admin", "--url", f"http://127.0.0.1:{broker.metrics_port}",
                          "--token", TOKEN, "compact", ORDERS, "0", "--roll"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr + out.stdout
    facts.update(broker=broker, admin=admin, base=f"http://127.0.0.1:{broker.metrics_port}", compact=out.stdout)
    yield facts
    broker.stop()


@pytest.fixture(scope="module")
def browser_context(tmp_path_factory):
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=FLAGS,
            viewport={"width": 1280, "height": 900})
        yield context
        context.close()


def shot(pg, tmp_path, name: str) -> None:
    """A full-page screenshot into the test's tmp dir (and $KOMPAKT_CONSOLE_SHOTS when set)."""
    path = tmp_path / f"{name}.png"
    pg.wait_for_function("() => Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)")
    pg.screenshot(path=str(path), full_page=True)
    copy_to = os.environ.get("KOMPAKT_CONSOLE_SHOTS")
    if copy_to:
        os.makedirs(copy_to, exist_ok=True)
        shutil.copy(path, os.path.join(copy_to, path.name))


@pytest.fixture
def page(browser_context, world, tmp_path, request):
    pg = browser_context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.tmp_path = tmp_path
    yield pg
    shot(pg, tmp_path, request.node.name)
    pg.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.fixture
def signed_in(page, world):
    """The admin token typed into the console's sign-in page (kept in a same-site cookie)."""
    page.goto(world["base"] + "/console/login")
    page.fill("input[name=token]", TOKEN)
    page.click("form button")
    expect(page.locator("h1")).to_have_text("Broker 1")
    return page


def test_broker_page_shows_listeners_log_dirs_and_versions(page, world):
    broker = world["broker"]
    page.goto(world["base"] + "/console")
    expect(page.locator("h1")).to_have_text("Broker 1")
    expect(page.locator("table").first).to_contain_text(f"127.0.0.1:{broker.port}")
    expect(page.locator("body")).to_contain_text(os.path.join(broker.log_dir))
    expect(page.locator("dl.facts")).to_contain_text("kompakt 0.1.0")
    assert page.locator("meter").count() >= 1            # disk use of the log dir
    shot(page, page.tmp_path, "console-broker")
    # the same page as JSON, for scripts (Datasette's convention)
    page.click("text=JSON")
    data = json.loads(page.locator("body").inner_text())
    assert data["listeners"][0]["port"] == broker.port and data["uptime_s"] > 0


def test_topic_page_shows_partitions_as_written_and_cleaned(page, world):
    page.goto(world["base"] + "/console/topics")
    row = page.locator("#topic-list tr", has_text=ORDERS)
    expect(row).to_contain_text("compact")
    shot(page, page.tmp_path, "console-topics")
    row.locator(f"a:text-is('{ORDERS}')").click()
    expect(page.locator("h1")).to_have_text(f"Topic {ORDERS}")
    p0 = page.locator("#partitions tbody tr").first
    cells = p0.locator("td")
    assert cells.nth(2).inner_text() == f"{3 * KEYS + 3}"            # high watermark: every record written
    assert cells.nth(5).inner_text() != "0"                            # segments
    assert "20" in cells.nth(10).inner_text()                          # distinct keys at the last clean
    assert int(cells.nth(9).inner_text().replace(",", "")) < 3 * KEYS  # records after the clean
    expect(page.locator("#partitions")).to_contain_text("Tombstones kept for groups billing")
    expect(page.locator("#overrides tr", has_text="min.cleanable.dirty.ratio")).to_contain_text("0.01")
    chart = page.locator("#partitions img[data-chart]")                # this topic's dirty ratio over time
    page.wait_for_function("img => img.complete && img.naturalWidth > 100", arg=chart.element_handle())
    shot(page, page.tmp_path, "console-topic")
    page.goto(world["base"] + f"/console/topics/{ORDERS}.json")         # the page's JSON
    data = json.loads(page.locator("body").inner_text())
    assert data["partitions"][0]["high_watermark"] == 3 * KEYS + 3 and data["overrides"]["cleanup.policy"] == "compact"


def test_changes_need_the_admin_token(page, world, browser_context):
    browser_context.clear_cookies()
    page.goto(world["base"] + "/console/topics")                       # reads stay open (as the API's)
    page.fill("#create-topic input[name=name]", "not-without-a-token")
    page.click("#create-topic button")
    expect(page.locator("h1")).to_have_text("Sign in")                 # a change: the token first
    page.fill("input[name=token]", "wrong")
    page.click("form button")
    expect(page.locator("p.error")).to_contain_text("not the admin API token")
    page.fill("input[name=token]", TOKEN)
    page.click("form button")
    expect(page.locator("h1")).to_have_text("Topics")                  # back where the change was asked
    assert "not-without-a-token" not in world["admin"].list_topics(timeout=10).topics
    browser_context.clear_cookies()


def test_a_form_posted_from_another_site_is_refused(signed_in, world):
    """Cross-site request forgery: a page on another origin (here http://localhost:port, not the
    console's http://127.0.0.1:port) submits a create-topic form to the console."""
    page = signed_in
    port = world["broker"].metrics_port
    page.goto(f"http://localhost:{port}/console/login")
    page.evaluate("""url => { const f = document.createElement('form'); f.method = 'post'; f.action = url;
        const i = document.createElement('input'); i.name = 'name'; i.value = 'forged-topic'; f.appendChild(i);
        document.body.appendChild(f); f.submit(); }""", f"http://127.0.0.1:{port}/console/topics")
    expect(page.locator("body")).to_contain_text("refused: a form posted from http://localhost")
    assert "forged-topic" not in world["admin"].list_topics(timeout=10).topics


def test_create_alter_grow_and_delete_a_topic_from_the_page(signed_in, world):
    page = signed_in
    admin = world["admin"]
    page.goto(world["base"] + "/console/topics")
    # a bad config: Kafka's own validation message, the typed values kept
    page.fill("#create-topic input[name=name]", "made-in-browser")
    page.fill("#create-topic input[name=partitions]", "2")
    page.check("#create-topic input[name=compacted]")
    page.fill("#create-topic textarea[name=configs]", "min.cleanable.dirty.ratio=2")
    page.click("#create-topic button")
    expect(page.locator("p.error")).to_contain_text("INVALID_CONFIG")
    expect(page.locator("p.error")).to_contain_text("min.cleanable.dirty.ratio")
    assert page.input_value("#create-topic input[name=name]") == "made-in-browser"
    assert "made-in-browser" not in admin.list_topics(timeout=10).topics
    page.fill("#create-topic textarea[name=configs]", "min.cleanable.dirty.ratio=0.2\nsegment.ms=600000")
    page.click("#create-topic button")
    expect(page.locator("p.done")).to_contain_text("Created topic made-in-browser (2 partition(s))")
    meta = admin.list_topics(timeout=10).topics["made-in-browser"]
    assert len(meta.partitions) == 2
    res = ConfigResource(ConfigResource.Type.TOPIC, "made-in-browser")
    configs = admin.describe_configs([res])[res].result(10)
    assert configs["cleanup.policy"].value == "compact" and configs["min.cleanable.dirty.ratio"].value == "0.2"
    # the name taken: Kafka's message
    page.goto(world["base"] + "/console/topics")
    page.fill("#create-topic input[name=name]", "made-in-browser")
    page.click("#create-topic button")
    expect(page.locator("p.error")).to_contain_text("TOPIC_ALREADY_EXISTS: Topic 'made-in-browser' already exists.")
    # alter a config, reset another
    page.goto(world["base"] + "/console/topics/made-in-browser")
    page.fill("#alter-configs textarea[name=set]", "min.compaction.lag.ms=5000")
    page.fill("#alter-configs input[name=delete]", "segment.ms")
    page.click("#alter-configs button")
    expect(page.locator("p.done")).to_contain_text("min.compaction.lag.ms=5000")
    configs = admin.describe_configs([res])[res].result(10)
    assert configs["min.compaction.lag.ms"].value == "5000" and configs["segment.ms"].is_default
    # fewer partitions is refused with Kafka's message; more is done
    page.fill("#add-partitions input[name=count]", "1")
    page.click("#add-partitions button")
    expect(page.locator("p.error")).to_contain_text("INVALID_PARTITIONS")
    page.fill("#add-partitions input[name=count]", "4")
    page.click("#add-partitions button")
    expect(page.locator("p.done")).to_contain_text("now has 4 partitions")
    assert len(admin.list_topics(timeout=10).topics["made-in-browser"].partitions) == 4
    # delete: only with the name typed
    page.click("#delete-topic button")
    expect(page.locator("p.error")).to_contain_text("type the topic's name")
    page.fill("#delete-topic input[name=confirm]", "made-in-browser")
    page.click("#delete-topic button")
    expect(page.locator("p.done")).to_contain_text("Deleted topic made-in-browser")
    assert "made-in-browser" not in admin.list_topics(timeout=10).topics
    expect(page.locator("#topic-list")).not_to_contain_text("made-in-browser")


def test_record_browser_shows_what_the_clients_wrote(signed_in, world):
    page = signed_in                                                   # records need the token
    page.goto(world["base"] + f"/console/topics/{EVENTS}/records")
    table = page.locator("table.records")
    for i in range(5):
        expect(table).to_contain_text(f"event {i}")
    expect(table).to_contain_text("committed in a transaction")
    expect(table).to_contain_text("aborted in a transaction")          # read_uncommitted sees it
    page.select_option("select[name=isolation]", "read_committed")
    page.click("#browse button")
    expect(table).to_contain_text("committed in a transaction")
    expect(table).not_to_contain_text("aborted in a transaction")
    page.goto(world["base"] + f"/console/topics/{EVENTS}/records.json?isolation=read_committed")
    values = [r["value"] for r in json.loads(page.locator("body").inner_text())["records"]]
    assert values[:5] == [f"event {i}" for i in range(5)] and "aborted in a transaction" not in values
    # the compacted topic: keys, JSON values, headers; from an offset
    page.goto(world["base"] + f"/console/topics/{ORDERS}/records?partition=1")   # empty partition
    expect(table).to_contain_text("No records here.")
    page.select_option("select[name=partition]", "0")
    page.select_option("select[name=decode]", "json")
    page.click("#browse button")
    expect(table).to_contain_text("order-19")
    expect(table).to_contain_text('"total": 192')                      # pretty JSON of the last value
    expect(table).to_contain_text("source")
    expect(table).to_contain_text("tombstone")
    shot(page, page.tmp_path, "console-records")
    page.select_option("select[name=decode]", "hex")
    page.click("#browse button")
    expect(table).to_contain_text("6f72 6465 722d")                      # "order-" in hex
    # from a timestamp in the future: nothing, and the page says why
    page.select_option("select[name=from]", "timestamp")
    page.fill("input[name=value]", str(world["t0"] + 3_600_000))
    page.click("#browse button")
    expect(page.locator("#records")).to_contain_text("no record has a timestamp at or after")


def test_groups_both_protocols_lag_and_reset(signed_in, world):
    page = signed_in
    admin = world["admin"]
    page.goto(world["base"] + "/console/groups")
    expect(page.locator("#group-list tr", has_text="billing")).to_contain_text("classic")
    expect(page.locator("#group-list tr", has_text="audit")).to_contain_text("consumer")
    page.click("text=billing")
    expect(page.locator("h1")).to_have_text("Group billing")
    offsets = page.locator("#group table").nth(1)
    expect(offsets).to_contain_text(ORDERS)
    row = offsets.locator("tbody tr").first
    assert row.locator("td").nth(2).inner_text() == "30"
    assert row.locator("td").nth(4).inner_text() == str(3 * KEYS + 3 - 30)        # lag
    shot(page, page.tmp_path, "console-group")
    page.select_option("#reset-offsets select[name=to]", "earliest")
    page.click("#reset-offsets button")
    expect(page.locator("p.done")).to_contain_text("Reset 1 offset(s)")        # billing committed orders-0 only
    got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("billing", [TopicPartition(ORDERS, 0)])])
    committed = got["billing"].result(10).topic_partitions[0].offset
    start = int(page.locator("#group table").nth(1).locator("tbody tr").first.locator("td").nth(2).inner_text())
    assert committed == start
    page.goto(world["base"] + "/console/groups/audit")
    expect(page.locator("dl.facts")).to_contain_text("consumer (KIP-848)")
    expect(page.locator("#group")).to_contain_text(EVENTS)
    # a KIP-848 group's offsets reset the same way (OffsetCommit with no member, group empty)
    page.select_option("#reset-offsets select[name=to]", "offset")
    page.fill("#reset-offsets input[name=value]", "2")
    page.click("#reset-offsets button")
    expect(page.locator("p.done")).to_contain_text(f"{EVENTS}-0→2")
    got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("audit", [TopicPartition(EVENTS, 0)])])
    assert got["audit"].result(10).topic_partitions[0].offset == 2


class LiveConsumer:
    """A consumer polling in a thread until stopped: a group with a member while the test looks."""

    def __init__(self, bootstrap: str, group: str, protocol: str, topic: str):
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": f"{group}-client",
                "auto.offset.reset": "earliest"}
        if protocol == "consumer":
            conf["group.protocol"] = "consumer"
        self.consumer = Consumer(conf)
        self.consumer.subscribe([topic])
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.consumer.poll(0.2)
        self.consumer.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_live_group_shows_its_member_and_refuses_a_reset(signed_in, world, protocol):
    page = signed_in
    group = f"live-{protocol}"
    live = LiveConsumer(world["broker"].bootstrap, group, protocol, EVENTS)
    try:
        page.goto(world["base"] + "/console/groups")
        expect(page.locator("#group-list")).to_contain_text(group, timeout=20_000)   # the page refreshes itself
        page.goto(world["base"] + f"/console/groups/{group}")
        members = page.locator("#group table").first
        expect(members).to_contain_text(f"{group}-client", timeout=20_000)
        expect(members).to_contain_text(f"{EVENTS}: 0", timeout=20_000)       # its assignment
        expect(page.locator("dl.facts")).to_contain_text("Stable")
        page.select_option("#reset-offsets select[name=to]", "earliest")
        page.click("#reset-offsets button")
        expect(page.locator("p.error")).to_contain_text("stop its consumers first")
    finally:
        live.close()


def test_transactions_and_producers(page, world):
    page.goto(world["base"] + "/console/transactions")
    row = page.locator("#transactions table").first.locator("tr", has_text="payments-tx")
    expect(row).to_contain_text("CompleteAbort")                       # its last transaction was aborted
    producer_id = row.locator("td").nth(2).inner_text()
    producers = page.locator("#transactions table").nth(2)
    expect(producers).to_contain_text(f"{EVENTS}-0")
    assert producer_id in [r.locator("td").nth(1).inner_text()
                           for r in producers.locator("tbody tr", has_text=f"{EVENTS}-0").all()]


def test_compact_now_from_the_topic_page(signed_in, world):
    page = signed_in
    page.goto(world["base"] + f"/console/topics/{PRICES}")
    page.locator("#partitions tbody tr").first.locator("text=compact now").click()
    expect(page.locator("p.done")).to_contain_text(f"Cleaned {PRICES}-0:")
    removed = int(page.locator("p.done").inner_text().split(":", 1)[1].split()[0])
    assert removed >= 0
    assert page.locator("#partitions tbody tr").first.locator("td").nth(9).inner_text() == "30"   # one per key
    page.goto(world["base"] + f"/console/topics/{EVENTS}")          # a delete-policy topic: no button
    assert page.locator("#partitions").locator("text=compact now").count() == 0
    # pause, and compact-now is refused with the API's reason; resume
    page.goto(world["base"] + f"/console/topics/{PRICES}")
    row = page.locator("#partitions tbody tr").first
    row.locator("text=pause cleaning").click()
    expect(page.locator("p.done")).to_contain_text(f"Cleaning of {PRICES}-0 paused (1 pause(s) outstanding).")
    expect(page.locator("#partitions tbody tr").first).to_contain_text("paused")
    page.locator("#partitions tbody tr").first.locator("text=compact now").click()
    expect(page.locator("p.error")).to_contain_text("is paused (1 pause(s) outstanding)")
    page.locator("#partitions tbody tr").first.locator("text=resume cleaning").click()
    expect(page.locator("p.done")).to_contain_text(f"Cleaning of {PRICES}-0 resumed.")


def test_cleaner_page_shows_the_pass_and_charts(page, world):
    page.goto(world["base"] + f"/console/topics/{PRICES}")
    page.click("text=what if…")                                        # from a compacted topic's page
    expect(page.locator("#whatif-form select[name=whatif]")).to_have_value(f"{PRICES}-0")
    page.goto(world["base"] + "/console/cleaner")
    passes = page.locator("#passes")
    expect(passes).to_contain_text(f"{ORDERS}-0")
    row = passes.locator("tbody tr", has_text=f"{ORDERS}-0").first
    removed = int(row.locator("td").nth(5).inner_text().replace(",", ""))
    assert removed >= 2 * KEYS - 3                                     # superseded values went away
    expect(page.locator("#held-back")).to_contain_text("billing")
    for img in page.locator("img[data-chart]").all():                 # charts drawn by the broker
        page.wait_for_function("img => img.complete && img.naturalWidth > 100", arg=img.element_handle())
    assert len(passes.locator("tbody tr", has_text=f"{PRICES}-0").all()) >= 1   # the cleaner ran by itself too
    page.select_option("#whatif-form select[name=whatif]", f"{PRICES}-0")
    page.fill("#whatif-form input[name=set]", "min.cleanable.dirty.ratio=0.9")
    page.click("#whatif-form button")
    page.wait_for_function("() => { const i = document.getElementById('whatif-chart');"
                           " return i && i.complete && i.naturalWidth > 100; }")
    shot(page, page.tmp_path, "console-cleaner")


def test_pages_update_themselves(page, world):
    page.goto(world["base"] + f"/console/topics/{EVENTS}")
    hwm = page.locator("#partitions tbody tr").first.locator("td").nth(2)
    before = int(hwm.inner_text().replace(",", ""))
    p = Producer({"bootstrap.servers": world["broker"].bootstrap})
    for i in range(3):
        p.produce(EVENTS, value=f"late {i}", partition=0)
    p.flush(10)
    expect(hwm).to_have_text(str(before + 3), timeout=15_000)          # no reload: the page polled


def _get(url: str, token: str | None = None) -> tuple[int, dict, dict]:
    """(status, JSON body, headers) of a GET with the admin token as a Bearer header, if given."""
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as exc:
        body = exc.read()
        return exc.code, (json.loads(body) if body.startswith(b"{") else {"text": body.decode()}), dict(exc.headers)


def test_record_counts_read_only_what_changed(world):
    """The topic page counts records exactly on every poll, from each segment's kept tally: a poll
    with nothing new reads no batch header, one after two more batches reads those two."""
    url = world["base"] + f"/console/topics/{EVENTS}.json"
    _get(url)
    status, first, _ = _get(url)
    before = first["partitions"][0]["records"]
    assert status == 200 and before["headers_read"] == 0
    p = Producer({"bootstrap.servers": world["broker"].bootstrap, "linger.ms": 0})
    for i in range(2):
        p.produce(EVENTS, value=f"counted {i}", partition=0)
        p.flush(10)
    after = _get(url)[1]["partitions"][0]["records"]
    assert after["headers_read"] == 2 and after["records"] == before["records"] + 2


def test_times_are_shown_in_utc_whatever_the_brokers_time_zone(signed_in, world):
    page = signed_in
    page.goto(world["base"] + f"/console/topics/{EVENTS}/records.json")
    records = json.loads(page.locator("body").inner_text())["records"]
    last = records[-1]
    page.goto(world["base"] + f"/console/topics/{EVENTS}/records")
    utc = dt.datetime.fromtimestamp(last["timestamp_ms"] / 1000, tz=dt.timezone.utc)
    row = page.locator("table.records tbody tr").nth(len(records) - 1)
    expect(row.locator("td").first).to_have_text(str(last["offset"]))
    expect(row.locator("td").nth(1)).to_have_text(utc.strftime("%Y-%m-%d %H:%M:%S UTC"))
    # an ISO date-time without an offset is UTC too (the broker's zone is 5.5 hours away)
    expected = min(r["offset"] for r in records if r["timestamp_ms"] >= last["timestamp_ms"])
    assert expected > records[0]["offset"]
    page.select_option("select[name=from]", "timestamp")
    page.fill("input[name=value]", utc.replace(tzinfo=None).isoformat(timespec="milliseconds"))
    page.click("#browse button")
    expect(page.locator("table.records tbody tr").first.locator("td").first).to_have_text(str(expected))


def test_sign_out_forgets_the_token(signed_in, world, browser_context):
    page = signed_in
    page.click("#sign-out button")
    expect(page.locator("h1")).to_have_text("Sign in")
    expect(page.locator("p.done")).to_have_text("Signed out.")
    assert "kompakt_admin_token" not in {c["name"] for c in browser_context.cookies()}
    page.goto(world["base"] + f"/console/topics/{EVENTS}/records")      # records need the token again
    expect(page.locator("h1")).to_have_text("Sign in")
    assert page.locator("#sign-out").count() == 0


def test_wrong_tokens_make_the_client_wait(page, world, browser_context):
    """Three wrong tokens in a row: the sign-in page and the API make this address wait (429 with
    Retry-After) and check nothing meanwhile, not even the right token; after the wait the right
    token signs in and clears the count."""
    browser_context.clear_cookies()
    page.goto(world["base"] + "/console/login")
    for attempt in range(3):
        page.fill("input[name=token]", f"guess-{attempt}")
        page.click("form button")
        expect(page.locator("p.error")).to_contain_text("not the admin API token")
    expect(page.locator("p.error")).to_contain_text("try again in 1 s")
    page.fill("input[name=token]", TOKEN)                               # right, but within the wait
    page.click("form button")
    expect(page.locator("p.error")).to_contain_text("too many wrong admin tokens from this address")
    status, body, headers = _get(world["base"] + f"/console/topics/{EVENTS}/records.json", TOKEN)
    assert status in (200, 429)                                         # the wait may be over already
    if status == 429:
        assert int(headers["Retry-After"]) >= 1 and "too many wrong admin tokens" in body["message"]
    deadline = time.monotonic() + 10
    while page.locator("h1").inner_text() != "Broker 1":                # poll: the wait is 1 s
        assert time.monotonic() < deadline, page.locator("p.error").inner_text()
        page.goto(world["base"] + "/console/login")
        page.fill("input[name=token]", TOKEN)
        page.click("form button")
        page.wait_for_load_state()
    browser_context.clear_cookies()


def test_a_topic_deleted_while_its_page_is_read_is_a_404(page, world):
    """Pages of a topic read (polled) over and over while it is created and deleted again: each
    answer is the page (200) or a clear 404, never a server error."""
    name = "short-lived"
    admin = world["admin"]
    statuses: dict[int, int] = {}
    odd: list = []
    stop = threading.Event()

    def poll() -> None:
        urls = [world["base"] + f"/console/topics/{name}.json",
                world["base"] + f"/console/topics/{name}/records.json"]
        while not stop.is_set():
            for url in urls:
                status, body, _ = _get(url, TOKEN)
                statuses[status] = statuses.get(status, 0) + 1
                if status not in (200, 404):
                    odd.append((url, status, body))

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        for _ in range(DELETE_ROUNDS):
            for f in admin.create_topics([NewTopic(name, 4, 1, config={"internal.segment.bytes": "200"})]).values():
                f.result(30)
            p = Producer({"bootstrap.servers": world["broker"].bootstrap, "linger.ms": 0})
            for i in range(40):
                p.produce(name, value=f"record {i}", partition=i % 4)
            p.flush(10)
            for f in admin.delete_topics([name], operation_timeout=30).values():
                f.result(30)
    finally:
        stop.set()
        poller.join(30)
    assert not poller.is_alive() and statuses.get(404) and statuses.get(200), statuses
    assert not odd, (statuses, odd[:3])
    page.goto(world["base"] + f"/console/topics/{name}")
    expect(page.locator("h1")).to_have_text("Error")
    expect(page.locator("p.error")).to_contain_text(f"UNKNOWN_TOPIC_OR_PARTITION: unknown topic '{name}'")
