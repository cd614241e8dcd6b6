from __future__ import annotations

import re
import threading

from crossbeat.metadata.ids import new_upload_id, new_version_id


def test_version_ids_strictly_increase_and_are_url_safe() -> None:
    ids = [new_version_id() for _ in range(20_000)]  # many share one millisecond
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert all(len(i) <= 32 and re.fullmatch(r"[0-9A-Z]+", i) for i in ids)


def test_version_ids_increase_across_threads() -> None:
    per_thread: list[list[str]] = [[] for _ in range(8)]

    def make(out: list[str]) -> None:
        out.extend(new_version_id() for _ in range(2_000))

    threads = [threading.Thread(target=make, args=(out,)) for out in per_thread]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = [i for out in per_thread for i in out]
    assert len(set(everything)) == len(everything)
    for out in per_thread:
        assert out == sorted(out)


def test_upload_ids_are_unique_and_time_ordered() -> None:
    ids = [new_upload_id() for _ in range(1_000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[0-9A-Z]+", i) for i in ids)


def test_forked_children_draw_different_tails() -> None:
    """Gateway workers are forked: each must reseed, or two could mint one id."""
    import os

    from crossbeat.metadata.ids import new_version_id

    tails = []
    for _ in range(2):
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: write one id's random tail and leave at once
            os.close(read_fd)
            os.write(write_fd, new_version_id()[-9:].encode())
            os._exit(0)
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as pipe:
            tails.append(pipe.read().decode())
        os.waitpid(pid, 0)
    assert len(tails[0]) == 9
    assert tails[0] != tails[1]
