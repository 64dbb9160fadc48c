"""Kafka's cleaner summary line, figure by figure (seed 000's example layout)."""
from kompakt.cleaner.stats import CleanerMetrics, CleanerStats, summary_line

MB = 1024 * 1024


class Tick:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_summary_line_matches_kafkas_layout():
    clock = Tick()
    s = CleanerStats(monotonic=clock)
    s.map_bytes_read = 100 * MB
    clock.t = 4.0
    s.index_done()
    s.bytes_read = 200 * MB
    s.bytes_written = 50 * MB
    s.messages_read = 2_000_000
    s.messages_written = 500_000
    s.buffer_utilization = 0.9
    clock.t = 10.0
    s.all_done()
    line = summary_line(2, "fruit-prices-12", 310715098, 325968881, s)
    assert line.split("\n") == [
        "",
        "\tLog cleaner thread 2 cleaned log fruit-prices-12 (dirty section = [310715098, 325968881])",
        "\t200.0 MB of log processed in 10.0 seconds (20.0 MB/sec).",
        "\tIndexed 100.0 MB in 4.0 seconds (25.0 Mb/sec, 40.0% of total time)",
        "\tBuffer utilization: 90.0%",
        "\tCleaned 200.0 MB in 6.0 seconds (33.3 Mb/sec, 60.0% of total time)",
        "\tStart size: 200.0 MB (2,000,000 messages)",
        "\tEnd size: 50.0 MB (500,000 messages)",
        "\t75.0% size reduction (75.0% fewer messages)",
        "",
    ]


def test_metrics_fold_the_last_run_of_each_worker():
    m = CleanerMetrics()
    for wid, (util, read, written, secs) in enumerate([(0.5, 100, 50, 3.0), (0.9, 100, 10, 1.0)]):
        clock = Tick()
        s = CleanerStats(monotonic=clock)
        s.buffer_utilization, s.bytes_read, s.bytes_written = util, read, written
        clock.t = secs
        s.all_done()
        m.record(wid, s)
    assert m.max_buffer_utilization_percent == 90.0
    assert m.max_clean_time_secs == 3.0
    assert m.cleaner_recopy_percent == 30.0
