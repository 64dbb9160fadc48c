"""Fixtures for cleaner tests: real Logs in a tmp log dir, a driven clock, a running LogCleaner."""
import pytest

from kompakt.cleaner import LogCleaner
from kompakt.config.broker_config import BrokerConfig
from kompakt.protocol import records as R

T0 = 1_700_000_000_000


class Clock:
    """time.time()/monotonic()/sleep() driven by the test (ms resolution is what logs use)."""

    def __init__(self, ms=T0):
        self.ms = ms

    def time(self):
        return self.ms / 1000.0

    def monotonic(self):
        return self.ms / 1000.0

    def sleep(self, s):
        self.ms += int(s * 1000)


class Logs:
    """A real LogManager over a tmp log dir, with a shortcut to create one-partition topics."""

    def __init__(self, log_dir, clock, **broker_kw):
        from kompakt.storage.log_manager import LogManager
        self.log_dir = log_dir
        self.clock = clock
        self.config = broker_config(log_dir, **broker_kw)
        self.manager = LogManager(self.config, time=clock)
        self.manager.startup()

    def all_logs(self):
        return self.manager.all_logs()

    @property
    def logs(self):
        return self.manager.all_logs()

    def create(self, topic, partitions=1, **overrides):
        configs = {k.replace("_", "."): str(v) for k, v in overrides.items()}
        configs.setdefault("cleanup.policy", "compact")
        self.manager.create_topic(topic, partitions, configs)
        return self.manager.get_log((topic, 0))

    def close(self):
        self.manager.shutdown()


def append(lg, recs, ts=None, **kw):
    """Append one batch of (key, value) at the log end; returns its base offset."""
    base = lg.log_end_offset
    ts = ts if ts is not None else lg._time.ms
    lg.append(R.build_batch([(k, v, [], ts) for k, v in recs], base_offset=base, base_timestamp=ts, **kw))
    return base


def read_log(lg):
    """[(offset, key, value)] of every data record from the log start, via Log.read."""
    out = []
    off = lg.log_start_offset
    while off < lg.log_end_offset:
        data = lg.read(off, 1 << 20).records
        if not data:
            break
        last = off
        for pos, h in R.iter_batches(data):
            assert R.valid_crc(data, pos, h)
            if not h.is_control:
                for r in R.decode_records(data, pos, h):
                    out.append((h.base_offset + r.offset_delta, r.key, r.value))
            last = h.next_offset
        off = max(last, off + 1)
    return out


def segment_map(lg):
    """{segment base offset: [record offsets]} straight from the segment files."""
    res = {}
    for s in lg.segments:
        data = open(s.log_path, "rb").read()
        offs = []
        for pos, h in R.iter_batches(data):
            offs += [h.base_offset + r.offset_delta for r in R.decode_records(data, pos, h)]
        res[s.base_offset] = offs
    return res


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def logs(tmp_path, clock):
    holder = Logs(str(tmp_path), clock)
    yield holder
    holder.close()


def broker_config(log_dir, **kw):
    # durable acks off: these tests append with Log.append, and the cleaner cleans only below the
    # high watermark, which with durable acks is the durable offset (tests/storage/test_group_commit.py
    # checks that bound)
    items = {"log.dirs": log_dir, "log.cleaner.threads": "1", "log.cleaner.backoff.ms": "60000",
             "log.cleaner.dedupe.buffer.size": str(24 * 100_000), "kompakt.durable.acks.enable": "false"}
    items.update({k: str(v) for k, v in kw.items()})
    return BrokerConfig.load(overrides=[f"{k}={v}" for k, v in items.items()], environ={})


@pytest.fixture
async def cleaner(logs, clock):
    c = LogCleaner(logs.config, logs.manager, time=clock)
    logs.manager.cleaner = c
    c.start()
    yield c
    await c.shutdown()
