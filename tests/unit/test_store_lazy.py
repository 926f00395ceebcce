"""One-job transactions (`Store.transaction(lazy_jobs=True)`): the same bytes as a whole one.

A lazy transaction parses only the job lines its body looks up and rewrites only the
changed ones. Each test here runs the same body both ways, on two copies of one store,
and compares the files byte for byte; and checks that laziness is used only on bytes the
Store itself wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronctl.errors import StoreCorruptError
from cronctl.paths import Paths
from cronctl.store import chain_doc
from cronctl.store.jsonstore import Store
from cronctl.store.lazyjobs import LazyJobs

Body = Callable[[dict[str, Any]], None]


def job(name: str, **extra: Any) -> dict[str, Any]:
    return {"command": f"echo {name}", "name": name, "state": {"claims": {}, "runs": 0}, **extra}


def seeded_store(home: Path, names: list[str], **extra: Any) -> Store:
    home.mkdir(parents=True, exist_ok=True)
    store = Store(Paths(home))
    with store.transaction() as doc:
        doc["jobs"].update({name: job(name, **extra) for name in names})
        doc["counters"]["seed"] = 1
    return store


def both_ways(tmp_path: Path, names: list[str], body: Body) -> tuple[bytes, bytes]:
    """The store file after `body` ran in a whole and in a lazy transaction."""
    whole = seeded_store(tmp_path / "whole", names)
    lazy = seeded_store(tmp_path / "lazy", names)
    with whole.transaction() as doc:
        body(doc)
    with lazy.transaction(lazy_jobs=True) as doc:
        body(doc)
    return Paths(tmp_path / "whole").store.read_bytes(), Paths(tmp_path / "lazy").store.read_bytes()


NAMES = [f"job-{index:03d}" for index in range(40)] + ["é-unicode", "z\u2028line", 'quo"te']


def test_a_lazy_transaction_parses_only_the_jobs_it_looks_up(tmp_path: Path) -> None:
    store = seeded_store(tmp_path, NAMES)
    with store.transaction(lazy_jobs=True) as doc:
        jobs = doc["jobs"]
        assert isinstance(jobs, LazyJobs)
        jobs["job-007"]["state"]["runs"] += 1
        assert "nobody" not in jobs
        assert dict.__len__(jobs) == 1  # the other 42 lines were never parsed
    assert store.read()["jobs"]["job-007"]["state"]["runs"] == 1


def test_changed_lines_give_the_bytes_of_a_whole_transaction(tmp_path: Path) -> None:
    def body(doc: dict[str, Any]) -> None:
        doc["jobs"]["job-000"]["state"]["claims"]["r1"] = {"slot": "now", "f": 1e-05, "big": 1e16}
        doc["jobs"]["z\u2028line"]["state"]["runs"] = 2
        doc["jobs"][NAMES[-1]]["paused"] = True  # the last line: no comma after it
        doc["counters"]["finished"] = 3
        doc.setdefault("metrics", {})["x"] = [1, 1.0, True]

    whole, lazy = both_ways(tmp_path, NAMES, body)
    assert lazy == whole


def test_walking_adding_and_removing_jobs_load_them_all_and_still_agree(tmp_path: Path) -> None:
    def body(doc: dict[str, Any]) -> None:
        jobs = doc["jobs"]
        jobs["job-001"]["state"]["runs"] = 5
        del jobs["job-002"]
        jobs["new"] = job("new")
        for name, entry in jobs.items():
            entry["state"]["seen"] = name
        assert len(jobs) == len(NAMES)

    whole, lazy = both_ways(tmp_path, NAMES, body)
    assert lazy == whole


def test_a_body_that_changes_nothing_writes_nothing(tmp_path: Path) -> None:
    store = seeded_store(tmp_path, NAMES)
    before = Paths(tmp_path).store.stat()
    with store.transaction(lazy_jobs=True) as doc:
        doc["jobs"]["job-003"]["state"]["runs"] = 0  # the value it had
    after = Paths(tmp_path).store.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


operations = st.lists(st.tuples(st.sampled_from(NAMES + ["absent"]),
                                st.sampled_from(["bump", "claim", "drop-claims", "look", "pop-state-key", "remove"])),
                      max_size=12)


@settings(max_examples=60, deadline=None)
@given(operations)
def test_any_lookups_and_changes_agree_with_a_whole_transaction(tmp_path_factory: pytest.TempPathFactory,
                                                                 ops: list[tuple[str, str]]) -> None:
    def body(doc: dict[str, Any]) -> None:
        jobs = doc["jobs"]
        for name, op in ops:
            entry = jobs.get(name)
            if entry is None:
                continue
            if op == "bump":
                entry["state"]["runs"] = entry["state"].get("runs", 0) + 1
            elif op == "claim":
                entry["state"]["claims"][f"r{len(entry['state']['claims'])}"] = {"slot": name, "n": 0.5}
            elif op == "drop-claims":
                entry["state"]["claims"].clear()
            elif op == "pop-state-key":
                entry["state"].pop("runs", None)
            elif op == "remove":
                jobs.pop(name)

    whole, lazy = both_ways(tmp_path_factory.mktemp("ops"), NAMES, body)
    assert lazy == whole


def test_a_store_changed_by_another_hand_is_parsed_whole_and_refused_when_broken(tmp_path: Path) -> None:
    store = seeded_store(tmp_path, NAMES)
    path = Paths(tmp_path).store
    # Another process (an editor, a disk) breaks a line this transaction would never look up.
    path.write_bytes(path.read_bytes().replace(b'"echo job-030"', b'"echo job-030'))
    broken = path.read_bytes()
    with pytest.raises(StoreCorruptError), store.transaction(lazy_jobs=True) as doc:
        doc["jobs"]["job-001"]["state"]["runs"] = 9
    assert path.read_bytes() == broken  # never overwritten


def test_a_store_written_by_another_store_object_is_opened_whole(tmp_path: Path) -> None:
    seeded_store(tmp_path, NAMES)
    other = Store(Paths(tmp_path))
    with other.transaction(lazy_jobs=True) as doc:
        assert not isinstance(doc["jobs"], LazyJobs)
        doc["jobs"]["job-001"]["state"]["runs"] = 1
    with other.transaction(lazy_jobs=True) as doc:  # now it wrote the bytes itself
        assert isinstance(doc["jobs"], LazyJobs)


def test_chain_jobs_are_seen_through_the_lazy_jobs(tmp_path: Path) -> None:
    store = seeded_store(tmp_path, ["up", "solo"])
    with store.transaction() as doc:
        doc["jobs"]["down"] = job("down", after=["up"])
    with store.transaction(lazy_jobs=True) as doc:
        assert not doc["jobs"].chain_free
        assert chain_doc.has_dependants(doc, "up")
    plain = seeded_store(tmp_path / "plain", ["up", "solo"])
    with plain.transaction(lazy_jobs=True) as doc:
        assert doc["jobs"].chain_free
        assert not chain_doc.has_dependants(doc, "up")
        assert dict.__len__(doc["jobs"]) == 0


def test_a_failed_body_writes_nothing(tmp_path: Path) -> None:
    store = seeded_store(tmp_path, NAMES)
    path = Paths(tmp_path).store
    before = path.read_bytes()
    with pytest.raises(RuntimeError), store.transaction(lazy_jobs=True) as doc:
        doc["jobs"]["job-001"]["state"]["runs"] = 9
        raise RuntimeError("body failed")
    assert path.read_bytes() == before


def test_jobs_read_a_chunk_at_a_time_are_the_jobs_read_whole(tmp_path: Path) -> None:
    from cronctl.store.lazyjobs import JobLines

    seeded_store(tmp_path, NAMES)
    raw = Paths(tmp_path).store.read_bytes()
    lines = JobLines.of(raw)
    assert lines is not None
    whole = Store(Paths(tmp_path)).read()["jobs"]
    for chunk_bytes in (1, 100, 1 << 18):
        assert dict(lines.entries(chunk_bytes)) == whole


def test_a_job_over_several_lines_stops_the_chunked_read(tmp_path: Path) -> None:
    from cronctl.store.lazyjobs import JobLines, NotStoreForm

    seeded_store(tmp_path, NAMES)
    raw = Paths(tmp_path).store.read_bytes().replace(b', "name": "job-005"', b',\n   "name": "job-005"')
    lines = JobLines.of(raw)
    assert lines is not None
    with pytest.raises(NotStoreForm):
        list(lines.entries(1))  # a chunk then ends inside job-005: it does not parse on its own


def test_whether_any_job_runs_after_another_is_read_from_the_bytes_or_else_parsed(tmp_path: Path) -> None:
    import json

    store = seeded_store(tmp_path, ["up", "solo"])
    assert store.chain_free()
    with store.transaction() as doc:
        doc["jobs"]["down"] = job("down", after=["up"])
    assert not store.chain_free()
    path = Paths(tmp_path).store
    path.write_text(json.dumps(json.loads(path.read_text()), indent=4))  # by hand: not one job per line
    assert not store.chain_free()


def test_many_lookups_go_through_an_index_of_the_lines_and_agree_with_a_whole_transaction(tmp_path: Path) -> None:
    names = [f"job-{index:04d}" for index in range(300)]

    def body(doc: dict[str, Any]) -> None:
        for name in names[::7] + ["absent", names[-1], names[0]]:
            entry = doc["jobs"].get(name)
            if entry is not None:
                entry["state"]["runs"] += 1
        assert "job-0001" in doc["jobs"] and "job-x" not in doc["jobs"]

    whole, lazy = both_ways(tmp_path, names, body)
    assert lazy == whole
    store = seeded_store(tmp_path / "index", names)
    with store.transaction(lazy_jobs=True) as doc:
        for name in names[:5]:
            doc["jobs"][name]["state"]["runs"] = 1
        assert doc["jobs"]._lines._index, "the fourth lookup built the index"
