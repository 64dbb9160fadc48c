"""broker/network/limits.py on its own: connection counting, overrides, and the request-memory pool."""
from kompakt.broker.network.limits import Limits, parse_overrides


class Conn:
    def __init__(self):
        self.resumed = 0

    def resume_held(self):
        self.resumed += 1


def test_overrides_parse_kafkas_format():
    assert parse_overrides("127.0.0.2:5, host-a:0,bad,[::1]:7") == {"127.0.0.2": 5, "host-a": 0, "::1": 7}
    assert parse_overrides("") == {}


def test_per_ip_and_total_limits_count_and_release():
    lim = Limits({"max.connections": 3, "max.connections.per.ip": 2,
                  "max.connections.per.ip.overrides": "10.0.0.9:0"})
    assert lim.admit("a") is None and lim.admit("a") is None
    assert lim.admit("a") == "max.connections.per.ip"
    assert lim.admit("10.0.0.9") == "max.connections.per.ip"        # an override of 0 refuses all
    assert lim.admit("b") is None
    assert lim.admit("c") == "max.connections"
    lim.release("a")
    assert lim.admit("c") is None
    assert lim.open_total == 3 and dict(lim.open_by_ip) == {"a": 1, "b": 1, "c": 1}
    assert lim.refused == {"max.connections.per.ip": 2, "max.connections": 1}


def test_the_pool_admits_while_any_memory_is_free_and_resumes_waiters_in_order():
    lim = Limits({"queued.max.request.bytes": 100})
    a, b, c = Conn(), Conn(), Conn()
    assert lim.reserve(a, 90)
    assert lim.reserve(a, 500)            # 10 bytes free: Kafka's non-strict pool lets a big one in
    assert not lim.reserve(b, 10) and not lim.reserve(c, 10)
    lim.free(500)                          # 90 used: the waiters go on, in arrival order (each
                                           # reserves again when it runs, and may wait again)
    assert (b.resumed, c.resumed) == (1, 1)
    lim.free(90)
    assert lim.queued_bytes == 0


def test_no_limit_by_default():
    lim = Limits({"queued.max.request.bytes": -1})
    assert all(lim.reserve(Conn(), 1 << 30) for _ in range(4))
