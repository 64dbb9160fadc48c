"""Test helpers: partition dirs of plain segment files, a file-level swap, reading records back."""
import os

from kompakt.cleaner import cleaner as C
from kompakt.protocol import records as R


def write_segment(dir_, base, batches):
    path = C.segment_file(dir_, base, ".log")
    with open(path, "wb") as f:
        for b in batches:
            f.write(b)
    for ext in (".index", ".timeindex"):
        open(C.segment_file(dir_, base, ext), "wb").close()
    return path


def seg_infos(dir_):
    bases = sorted(int(n[:20]) for n in os.listdir(dir_) if n.endswith(".log"))
    out = []
    for b in bases:
        p = C.segment_file(dir_, b, ".log")
        st = os.stat(p)
        out.append(C.SegmentInfo(b, p, st.st_size,
                                 os.path.getsize(C.segment_file(dir_, b, ".index")),
                                 os.path.getsize(C.segment_file(dir_, b, ".timeindex")),
                                 st.st_mtime))
    return out


def job_for(dir_, first_dirty, now_ms, delete_retention_ms=86_400_000, active_base=None, **kw):
    segs = seg_infos(dir_)
    if active_base is None:
        active_base = segs[-1].base_offset
    cleanable = [s for s in segs if s.base_offset < active_base]
    tail = [s for s in segs if s.base_offset >= active_base]
    return C.CleanJob(("t", 0), dir_, cleanable, tail, first_dirty, active_base, 0, now_ms,
                      delete_retention_ms, **kw)


def swap_files(dir_, result):
    """What replace_segments does, minus crash safety: cleaned files become live, old ones go."""
    for g in result.groups:
        for old in g.replaces:
            for ext in (".log", ".index", ".timeindex", ".txnindex"):
                try:
                    os.unlink(C.segment_file(dir_, old, ext))
                except FileNotFoundError:
                    pass
        for ext in (".log", ".index", ".timeindex", ".txnindex"):
            try:
                os.rename(C.segment_file(dir_, g.base_offset, ext, ".cleaned"),
                          C.segment_file(dir_, g.base_offset, ext))
            except FileNotFoundError:
                assert ext == ".txnindex", f"{ext}.cleaned missing"


def read_all(dir_):
    """[(offset, key, value)] across the partition, checking CRCs and offset order."""
    out = []
    for s in seg_infos(dir_):
        data = open(s.log_path, "rb").read()
        for pos, h in R.iter_batches(data):
            assert R.valid_crc(data, pos, h)
            if h.is_control:
                continue
            for r in R.decode_records(data, pos, h):
                out.append((h.base_offset + r.offset_delta, r.key, r.value))
    offs = [o for o, _, _ in out]
    assert offs == sorted(offs) and len(set(offs)) == len(offs)
    return out


def segment_offsets(dir_):
    """{base offset: [record offsets]} for looking at the files after each step."""
    res = {}
    for s in seg_infos(dir_):
        data = open(s.log_path, "rb").read()
        offs = []
        for pos, h in R.iter_batches(data):
            offs += [h.base_offset + r.offset_delta for r in R.decode_records(data, pos, h)]
        res[s.base_offset] = offs
    return res
