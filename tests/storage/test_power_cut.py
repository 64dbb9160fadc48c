"""The page-cache model (kompakt/storage/power_cut.py) on real files in a real child process: what a
power cut keeps is exactly what was synced, and every sync and namespace change goes through the
storage file layer (kompakt/storage/files.py) where the model sees it."""
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import kompakt
from kompakt.storage import power_cut

CHILD = textwrap.dedent("""
    import os, sys, time
    from kompakt.storage import files as fs
    root = sys.argv[1]
    def write(path, data, mode="wb"):
        with open(path, mode) as fh:
            fh.write(data)
            fh.flush()
            return fh
    def synced(path, data, mode="wb"):
        with open(path, mode) as fh:
            fh.write(data)
            fh.flush()
            fs.fsync(fh.fileno())

    # kept: appended and synced; the tail after the sync is lost
    synced(f"{root}/seg.log", b"A" * 100)
    write(f"{root}/seg.log", b"B" * 50, "ab")
    # its name synced, its data never: empty (the zero-length files of ext4 after a crash)
    write(f"{root}/unsynced-data", b"hello")
    synced(f"{root}/synced", b"x")
    fs.fsync_dir(root)                       # the three names above are durable from here ...
    synced(f"{root}/late-name", b"y")        # ... this one is not: synced data, unsynced name
    # rename over an existing file without a directory sync: the old content comes back
    synced(f"{root}/state.tmp", b"new state")
    fs.replace(f"{root}/state.tmp", f"{root}/state")
    # unlink without a directory sync, then a new file that may reuse the inode number: the
    # unlinked file comes back with its own content
    fs.unlink(f"{root}/old")
    synced(f"{root}/reuse", b"R" * 10)
    # a whole tree removed without syncing its parent: back
    fs.rmtree(f"{root}/tree")
    # a new directory with a synced file in it, the directory synced, its parent not: gone
    os.mkdir(f"{root}/newdir")
    synced(f"{root}/newdir/f", b"z")
    fs.fsync_dir(f"{root}/newdir")
    # a preallocated (sparse) index: its synced size and entries are kept
    fd = os.open(f"{root}/sparse.index", os.O_RDWR | os.O_CREAT, 0o600)
    os.ftruncate(fd, 10 * 1024 * 1024)
    os.pwrite(fd, b"\\x01" * 8, 0)
    fs.fdatasync(fd)
    os.pwrite(fd, b"\\x02" * 8, 8)            # not synced
    os.close(fd)
    # renamed and the rename synced: durable under the new name
    synced(f"{root}/moved.tmp", b"moved")
    fs.replace(f"{root}/moved.tmp", f"{root}/moved")
    fs.replace(f"{root}/sub/inner", f"{root}/sub/inner2")
    fs.fsync_dir(f"{root}/sub")
    print("ready", flush=True)
    time.sleep(60)
""")


def run_child(tmp_path, root, journal, env=None, script=CHILD):
    path = tmp_path / "child.py"
    path.write_text(script)
    return subprocess.Popen([sys.executable, str(path), str(root)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, power_cut.JOURNAL_ENV: str(journal), **(env or {})})


def setup_root(tmp_path):
    root = tmp_path / "data"
    (root / "tree" / "deep").mkdir(parents=True)
    (root / "tree" / "deep" / "f").write_bytes(b"deep")
    (root / "sub").mkdir()
    (root / "sub" / "inner").write_bytes(b"inner")
    (root / "old").write_bytes(b"old content")
    (root / "state").write_bytes(b"old state")
    os.chmod(root / "state", 0o600)
    journal = tmp_path / "journal"
    power_cut.begin(str(journal), [str(root)])
    return root, journal


def test_a_cut_keeps_exactly_what_was_synced(tmp_path):
    root, journal = setup_root(tmp_path)
    child = run_child(tmp_path, root, journal)
    assert child.stdout.readline().strip() == "ready"
    before = (root / "seg.log").read_bytes()
    assert before == b"A" * 100 + b"B" * 50 and (root / "newdir").exists()     # all there while running
    power_cut.cut(child.pid, str(journal))
    child.wait(10)

    assert (root / "seg.log").read_bytes() == b"A" * 100
    assert (root / "unsynced-data").read_bytes() == b""
    assert (root / "synced").read_bytes() == b"x"
    assert not (root / "late-name").exists()
    assert (root / "state").read_bytes() == b"old state" and not (root / "state.tmp").exists()
    assert (os.stat(root / "state").st_mode & 0o777) == 0o600
    assert (root / "old").read_bytes() == b"old content" and not (root / "reuse").exists()
    assert (root / "tree" / "deep" / "f").read_bytes() == b"deep"
    assert not (root / "newdir").exists()
    assert not (root / "moved").exists() and not (root / "moved.tmp").exists()
    assert (root / "sub" / "inner2").read_bytes() == b"inner" and not (root / "sub" / "inner").exists()
    # the sparse index: the unsynced write is gone, so is its name (root not synced after create)
    assert not (root / "sparse.index").exists()


def test_synced_names_and_sparse_files_survive(tmp_path):
    root, journal = setup_root(tmp_path)
    script = CHILD.replace("print(\"ready\"", "fs.fsync_dir(root)\nprint(\"ready\"")
    child = run_child(tmp_path, root, journal, script=script)
    assert child.stdout.readline().strip() == "ready"
    power_cut.cut(child.pid, str(journal))
    child.wait(10)
    index = root / "sparse.index"
    assert index.stat().st_size == 10 * 1024 * 1024
    with open(index, "rb") as fh:
        assert fh.read(16) == b"\x01" * 8 + b"\x00" * 8
    assert index.stat().st_blocks * 512 < 1024 * 1024          # still sparse
    assert (root / "state").read_bytes() == b"new state"
    assert (root / "moved").read_bytes() == b"moved" and (root / "late-name").read_bytes() == b"y"
    assert not (root / "old").exists() and (root / "reuse").read_bytes() == b"R" * 10
    assert not (root / "tree").exists()
    assert (root / "newdir" / "f").read_bytes() == b"z"
    # the journal now starts a new run: a second cut without writes changes nothing
    power_cut.restore(str(journal))
    assert (root / "newdir" / "f").read_bytes() == b"z" and index.stat().st_size == 10 * 1024 * 1024


def test_a_crash_point_cuts_the_power_under_the_process_and_its_children(tmp_path):
    root, journal = setup_root(tmp_path)
    script = textwrap.dedent("""
        import multiprocessing, os, sys, time
        from kompakt.storage import files as fs
        def worker(root):
            time.sleep(0.5)
            open(f"{root}/from-the-orphan", "wb").close()
            fs.fsync_dir(root)
        if __name__ == "__main__":
            root = sys.argv[1]
            multiprocessing.Process(target=worker, args=(root,)).start()
            with open(f"{root}/a", "wb") as fh:
                fh.write(b"a")
                fs.fsync(fh.fileno())        # file_op 1
            fs.fsync_dir(root)               # file_op 2: the cut comes before it
            print("survived", flush=True)
    """)
    child = run_child(tmp_path, root, journal, env={"TEST_KOMPAKT_CRASH_AT": "file_op:2"}, script=script)
    assert child.wait(30) == -9
    assert child.stdout.read() == ""
    power_cut.restore(str(journal))
    assert not (root / "a").exists()                     # synced, but its name never was
    import time
    time.sleep(1.0)
    assert not (root / "from-the-orphan").exists()       # the worker died with the power


def test_the_storage_code_syncs_and_renames_only_through_the_file_layer():
    """Every sync, rename and removal the broker makes must be visible to the model."""
    package = Path(kompakt.__file__).parent
    raw = re.compile(r"\bos\.(fsync|fdatasync|replace|rename|renames|unlink|remove|rmdir|removedirs)\(|"
                     r"\bshutil\.(rmtree|move)\(")
    exempt = {"storage/files.py", "storage/power_cut.py",
              "native/__init__.py",          # the compiled-extension cache, outside any log dir
              "pipeline/jobs/compact.py", "pipeline/jobs/audit.py"}   # the pipeline's own output
    found = []
    for path in package.rglob("*.py"):
        rel = path.relative_to(package).as_posix()
        if rel in exempt:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if raw.search(line.split("#")[0]):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, "use kompakt.storage.files instead:\n" + "\n".join(found)
