"""The `kompakt` data source through real PySpark: same rows as the pure-Python reader, every
codec, pushdown that reads fewer partitions, corrupt input reported, read_committed, as_of."""
from __future__ import annotations

import pytest

from kompakt.pipeline import reader as rd
from kompakt.protocol import records as R

from .conftest import keyed_batches, txn_batches, write_partition

pytestmark = pytest.mark.spark

CODECS = [R.COMPRESSION_NONE, R.COMPRESSION_GZIP, R.COMPRESSION_SNAPPY, R.COMPRESSION_LZ4, R.COMPRESSION_ZSTD]


@pytest.fixture(scope="module")
def codec_log(tmp_path_factory):
    """Topic `c`, one partition per codec (partition n uses codec n), plus topic `big` in 3 partitions."""
    d = str(tmp_path_factory.mktemp("codecs"))
    for codec in CODECS:
        write_partition(d, "c", codec, keyed_batches(300, 40, codec=codec, tombstone_every=11, keyless_every=37),
                        segment_bytes=6000)
    for p in range(3):
        write_partition(d, "big", p, keyed_batches(1500, 100), segment_bytes=12000)
    return d


def _python_rows(path, **kw):
    out = []
    for part in rd.find_partitions(path):
        out += [(r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type, r.key, r.value,
                 [(k, v) for k, v in r.headers], r.is_tombstone, r.is_control, r.producer_id,
                 r.batch_base_offset, r.segment) for r in rd.read_partition(part, **kw)]
    return sorted(out, key=lambda t: (t[0], t[1], t[2]))


def _spark_rows(df):
    rows = [(r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type, r.key, r.value,
             [(h.key, h.value) for h in r.headers], r.is_tombstone, r.is_control, r.producer_id,
             r.batch_base_offset, r.segment) for r in df.collect()]
    return sorted(rows, key=lambda t: (t[0], t[1], t[2]))


def test_same_rows_as_pure_python_for_every_codec(spark, codec_log):
    df = spark.read.format("kompakt").option("split_bytes", "4000").load(codec_log + "/c")
    assert df.columns == ["topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value",
                          "headers", "is_tombstone", "is_control", "producer_id", "batch_base_offset", "segment"]
    got = _spark_rows(df)
    assert got == _python_rows(codec_log + "/c")
    per_codec = {p: sum(1 for r in got if r[1] == p) for p in CODECS}
    assert per_codec == {p: 300 for p in CODECS}
    sample = [r for r in got if r[1] == R.COMPRESSION_ZSTD and r[2] == 12][0]
    assert sample[5:8] == (b"k12", b"v12", [("i", b"12")])
    assert df.rdd.getNumPartitions() > len(CODECS)  # segments are split further


def test_pushdown_reads_fewer_partitions_and_same_answer(spark, codec_log):
    base = spark.read.format("kompakt").option("split_bytes", "4000").load(codec_log)
    full = base.rdd.getNumPartitions()
    cases = [
        ("topic = 'big'", False),
        ("topic = 'big' AND partition = 1", False),
        ("topic = 'big' AND partition IN (0, 2) AND offset >= 1400", True),
        ("offset BETWEEN 100 AND 120", False),
        ("timestamp > 1700000001400", True),
    ]
    for cond, compare in cases:
        pushed = base.where(cond)
        n = pushed.rdd.getNumPartitions()
        assert n < full, cond
        if not compare:  # planning only: each comparison costs two Spark jobs
            continue
        expected = sorted((r.topic, r.partition, r.offset) for r in
                          spark.read.format("kompakt").option("pushdown", "false").load(codec_log)
                          .where(cond).select("topic", "partition", "offset").collect())
        assert sorted((r.topic, r.partition, r.offset) for r in pushed.select("topic", "partition", "offset").collect()) == expected, cond
    past_end = base.where("offset > 100000")
    assert past_end.rdd.getNumPartitions() <= len(CODECS) + 3  # only each partition's last segment
    assert past_end.count() == 0


def test_selected_columns_and_extras(spark, codec_log):
    df = (spark.read.format("kompakt").schema("offset long, record_bytes double, compression int")
          .load(codec_log + "/c-3"))
    rows = df.collect()
    assert len(rows) == 300 and {r.compression for r in rows} == {R.COMPRESSION_LZ4}
    assert all(r.record_bytes > 0 for r in rows)
    with pytest.raises(Exception, match="no column"):
        spark.read.format("kompakt").schema("nope long").load(codec_log).collect()


def test_corrupt_input_is_reported_not_silently_read(spark, tmp_path):
    pdir = write_partition(str(tmp_path), "t", 0, keyed_batches(100, 10), segment_bytes=100000)
    seg = rd.list_segments(pdir)[0]
    with open(seg.log_path, "r+b") as f:
        data = bytearray(f.read())
        pos = [p for p, _ in R.iter_batches(bytes(data))][3]
        data[pos + R.RECORDS_POS + 2] ^= 0x55
        f.seek(0)
        f.write(data)
    with pytest.raises(Exception) as e:
        spark.read.format("kompakt").load(str(tmp_path)).count()
    assert seg.log_path in str(e.value) and f"position {pos}" in str(e.value)
    skipped = spark.read.format("kompakt").option("corrupt", "skip").load(str(tmp_path))
    assert skipped.count() == 90


def test_read_committed_and_as_of(spark, tmp_path):
    write_partition(str(tmp_path), "tx", 0, txn_batches())
    df = spark.read.format("kompakt").option("isolation", "read_committed").load(str(tmp_path))
    assert sorted(r.offset for r in df.collect()) == [0, 1, 2, 3, 8, 9]
    everything = spark.read.format("kompakt").load(str(tmp_path))  # read_uncommitted: no markers
    assert sorted(r.offset for r in everything.collect()) == [0, 1, 2, 3, 4, 5, 8, 9]
    assert everything.where("is_control").count() == 0
    with_markers = spark.read.format("kompakt").option("include_control", "true").load(str(tmp_path))
    assert sorted((r.offset, r.is_control) for r in with_markers.where("is_control").collect()) == [(6, True), (7, True)]
    assert with_markers.count() == 10
    committed_markers = (spark.read.format("kompakt").option("isolation", "read_committed")
                         .option("include_control", "TRUE").load(str(tmp_path)))
    assert sorted(r.offset for r in committed_markers.collect()) == [0, 1, 2, 3, 6, 7, 8, 9]
    for bad in ({"include_control": "yes"}, {"include_control": "true", "keyed_only": "true"}):
        with pytest.raises(Exception, match="include_control"):
            spark.read.format("kompakt").options(**bad).load(str(tmp_path)).count()
    as_of = spark.read.format("kompakt").option("as_of_offset", "5").load(str(tmp_path))
    assert sorted(r.offset for r in as_of.collect()) == [0, 1, 2, 3, 4, 5]
    write_partition(str(tmp_path), "ts", 0, keyed_batches(50, 5))
    by_ts = spark.read.format("kompakt").option("as_of_timestamp", str(1_700_000_000_000 + 9)).load(str(tmp_path / "ts"))
    assert sorted(r.offset for r in by_ts.collect()) == list(range(10))


def test_keyed_only_read(spark, tmp_path):
    """Exact compaction's input: keyed records of data batches whose transaction did not abort."""
    write_partition(str(tmp_path), "tx", 0, txn_batches())
    df = (spark.read.format("kompakt").schema("key binary, offset long, batch_base_offset long")
          .option("keyed_only", "true").load(str(tmp_path)))
    rows = sorted((r.offset, bytes(r.key), r.batch_base_offset) for r in df.collect())
    # 4-5 aborted, 6-7 markers, 9 keyless
    assert rows == [(0, b"a", 0), (1, b"b", 0), (2, b"a", 2), (3, b"c", 2), (8, b"e", 8)]
    with pytest.raises(Exception, match="keyed_only reads the columns"):
        spark.read.format("kompakt").schema("key binary, value binary").option("keyed_only", "true") \
            .load(str(tmp_path)).collect()
    with pytest.raises(Exception, match="corrupt=fail"):
        spark.read.format("kompakt").option("keyed_only", "true").option("corrupt", "skip") \
            .load(str(tmp_path)).collect()
