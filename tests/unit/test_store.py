"""The store contract in one process: documents, revisions, backups, faults, versions."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from tests.helpers.store_helpers import seed, temp_files

from cronctl.errors import StoreCorruptError, StoreError, StoreWriteError
from cronctl.paths import Paths, open_home
from cronctl.store.jsonstore import (
    CURRENT_VERSION,
    MISSING_STORE,
    WRITE_STEPS,
    Store,
    empty_document,
    migrate,
    serialize,
)


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return open_home(tmp_path / "home")


def fail_at(step: str, code: int = errno.EIO) -> Any:
    """A fault hook that fails the write at one step the way a disk would."""

    def fault(reached: str) -> None:
        if reached == step:
            raise OSError(code, os.strerror(code))

    return fault


# --- documents and revisions ---------------------------------------------------------


def test_an_empty_home_reads_as_the_empty_document(paths: Paths) -> None:
    assert Store(paths).read() == empty_document() == {"version": 1, "rev": 0, "jobs": {}, "counters": {}}
    assert not paths.store.exists()


def test_empty_document_returns_a_fresh_dict_each_time() -> None:
    first = empty_document()
    first["jobs"]["x"] = {}
    assert empty_document()["jobs"] == {}


def test_a_transaction_writes_its_changes_and_bumps_rev_by_one(paths: Paths) -> None:
    store = Store(paths)
    assert store.last_written_rev is None
    for expected_rev in (1, 2, 3):
        with store.transaction() as doc:
            doc["jobs"][f"job{expected_rev}"] = {"command": "true"}
        assert store.last_written_rev == expected_rev
        on_disk = json.loads(paths.store.read_text(encoding="utf-8"))
        assert on_disk["rev"] == expected_rev
        assert on_disk == store.read()
    assert sorted(store.read()["jobs"]) == ["job1", "job2", "job3"]


def test_the_store_is_sorted_indented_utf8_json_ending_in_a_newline(paths: Paths) -> None:
    store = Store(paths)
    with store.transaction() as doc:
        doc["jobs"]["zeta"] = {"b": 1, "a": "café"}
        doc["jobs"]["alpha"] = {}
    raw = paths.store.read_bytes()
    assert raw == serialize(store.read())
    assert raw.endswith(b"}\n")
    assert "café".encode() in raw
    assert raw.index(b'"alpha"') < raw.index(b'"zeta"')
    assert b'\n "counters"' in raw  # indent=1


def test_changing_a_value_to_an_equal_value_of_another_json_type_is_a_change(paths: Paths) -> None:
    seed(paths, {"a": {"v": 1}})
    store = Store(paths)
    for value in (True, 1.0, "1", 1):
        with store.transaction() as doc:
            doc["jobs"]["a"]["v"] = value
        assert store.read()["jobs"]["a"]["v"] == value
        assert type(store.read()["jobs"]["a"]["v"]) is type(value)
    assert store.read()["rev"] == 5


def test_a_transaction_that_changes_nothing_writes_nothing(paths: Paths) -> None:
    seed(paths, {"a": {"command": "true"}})
    before = paths.store.stat()
    store = Store(paths)
    with store.transaction() as doc:
        doc["jobs"]["a"] = {"command": "true"}  # the same value again
    after = paths.store.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert store.read()["rev"] == 1
    assert store.last_written_rev is None


def test_a_no_op_transaction_on_an_empty_home_creates_no_store(paths: Paths) -> None:
    with Store(paths).transaction() as doc:
        assert doc == empty_document()
    assert not paths.store.exists()


def test_a_caller_cannot_set_rev_by_hand(paths: Paths) -> None:
    store = Store(paths)
    with store.transaction() as doc:
        doc["rev"] = 41
        doc["jobs"]["a"] = {}
    assert store.read()["rev"] == 1
    with store.transaction() as doc:
        doc["rev"] = 41  # and changing only rev is no change at all
    assert store.read()["rev"] == 1


def test_an_exception_inside_a_transaction_writes_nothing_and_releases_the_lock(paths: Paths) -> None:
    original = seed(paths, {"a": {"command": "true"}})
    store = Store(paths, lock_timeout=1)
    with pytest.raises(ValueError, match="the body failed"):
        with store.transaction() as doc:
            doc["jobs"].clear()
            doc["counters"]["n"] = 5
            raise ValueError("the body failed")
    assert paths.store.read_bytes() == original
    with store.transaction() as doc:  # would time out if the lock were still held
        doc["counters"]["n"] = 1
    assert store.read()["rev"] == 2


def test_transactions_do_not_nest_in_one_thread(paths: Paths) -> None:
    store = Store(paths)
    with store.transaction():
        with pytest.raises(RuntimeError, match="do not nest"):
            with Store(paths).transaction():
                pass


def test_a_change_that_would_make_the_store_unreadable_is_refused(paths: Paths) -> None:
    original = seed(paths, {"a": {}})
    with pytest.raises(StoreError, match="refusing to write"):
        with Store(paths).transaction() as doc:
            doc["jobs"] = ["not", "an", "object"]
    assert paths.store.read_bytes() == original


def test_store_backup_and_lock_files_are_private(paths: Paths) -> None:
    store = Store(paths)
    for value in range(2):
        with store.transaction() as doc:
            doc["counters"]["n"] = value
    for path in (paths.store, paths.store_backup, paths.store_lock):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_the_lock_file_keeps_its_inode_across_many_writes(paths: Paths) -> None:
    store = Store(paths)
    with store.transaction() as doc:
        doc["counters"]["n"] = 0
    inode = paths.store_lock.stat().st_ino
    for value in range(1, 50):
        with store.transaction() as doc:
            doc["counters"]["n"] = value
    assert paths.store_lock.stat().st_ino == inode
    assert store.read()["rev"] == 50


def test_the_backup_holds_the_previous_document(paths: Paths) -> None:
    store = Store(paths)
    with store.transaction() as doc:
        doc["jobs"]["a"] = {"v": 1}
    assert not paths.store_backup.exists()  # the first write has nothing to keep
    first = paths.store.read_bytes()
    with store.transaction() as doc:
        doc["jobs"]["a"] = {"v": 2}
    assert paths.store_backup.read_bytes() == first
    second = paths.store.read_bytes()
    with store.transaction() as doc:
        doc["jobs"]["a"] = {"v": 3}
    assert paths.store_backup.read_bytes() == second
    assert temp_files(paths) == []


def test_read_if_changed_returns_none_while_the_store_is_unchanged(paths: Paths) -> None:
    store = Store(paths)
    doc, empty_sig = store.read_if_changed(None)
    assert doc == empty_document() and empty_sig == MISSING_STORE
    assert store.read_if_changed(empty_sig) == (None, MISSING_STORE)

    with store.transaction() as doc:
        doc["jobs"]["a"] = {}
    doc, sig = store.read_if_changed(empty_sig)
    assert doc is not None and doc["rev"] == 1
    assert store.read_if_changed(sig) == (None, sig)

    with store.transaction():
        pass  # no change, no new file
    assert store.read_if_changed(sig) == (None, sig)

    with store.transaction() as doc:
        doc["jobs"]["b"] = {}
    doc, newer = store.read_if_changed(sig)
    assert doc is not None and doc["rev"] == 2 and newer != sig


def test_read_if_changed_costs_one_stat_when_nothing_changed(paths: Paths, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(paths)
    seed(paths, {"a": {}})
    _, sig = store.read_if_changed(None)
    calls: list[str] = []
    real_stat = os.stat

    def counting_stat(*args: Any, **kwargs: Any) -> os.stat_result:
        calls.append("stat")
        return real_stat(*args, **kwargs)

    monkeypatch.setattr(os, "stat", counting_stat)
    monkeypatch.setattr("builtins.open", lambda *a, **k: pytest.fail("the store was opened"))
    assert store.read_if_changed(sig) == (None, sig)
    assert calls == ["stat"]


def test_stale_temp_files_of_a_crashed_writer_are_removed_by_the_next_transaction(paths: Paths) -> None:
    seed(paths, {"a": {}})
    for name in ("jobs.json.tmp.999.deadbeef", "jobs.json.bak.tmp.999.cafe"):
        (paths.home / name).write_text("half a document")
    assert Store(paths).read()["jobs"] == {"a": {}}  # a reader neither minds nor removes them
    with Store(paths).transaction():
        pass
    assert temp_files(paths) == []


def test_a_missing_home_is_a_store_error_naming_the_lock(tmp_path: Path) -> None:
    store = Store(Paths(tmp_path / "nowhere"))
    with pytest.raises(StoreError, match=r"nowhere/jobs\.lock"):
        with store.transaction():
            pass


# --- faults injected in process --------------------------------------------------------


@pytest.mark.parametrize("step", [step for step in WRITE_STEPS if step != "dirfsync"])
def test_an_io_error_before_the_rename_leaves_the_old_store_untouched(paths: Paths, step: str) -> None:
    original = seed(paths, {"a": {"v": 1}})
    with Store(paths).transaction() as doc:
        doc["jobs"]["a"] = {"v": 2}
    backup = paths.store_backup.read_bytes()
    current = paths.store.read_bytes()
    store = Store(paths, fault=fail_at(step))
    with pytest.raises(StoreWriteError) as caught:
        with store.transaction() as doc:
            doc["jobs"]["a"] = {"v": 3}
    message = str(caught.value)
    assert str(paths.store) in message
    assert "Input/output error" in message
    assert f"at step {step}" in message
    assert "the store was not changed" in message
    assert paths.store.read_bytes() == current
    assert paths.store_backup.read_bytes() == (backup if step != "rename" else current)
    assert original != current
    assert temp_files(paths) == []
    assert store.last_written_rev is None


def test_a_write_after_a_failed_rename_leaves_no_temp_file_and_backs_up_the_old_document(paths: Paths) -> None:
    seed(paths, {"a": {"v": 1}})
    with pytest.raises(StoreWriteError):
        with Store(paths, fault=fail_at("rename")).transaction() as doc:
            doc["jobs"]["a"] = {"v": "lost"}
    # The backup step ran, so the backup and the store are now one inode.
    assert paths.store_backup.stat().st_ino == paths.store.stat().st_ino
    current = paths.store.read_bytes()
    with Store(paths).transaction() as doc:
        doc["jobs"]["a"] = {"v": 2}
    assert temp_files(paths) == []
    assert paths.store_backup.read_bytes() == current
    assert Store(paths).read()["jobs"]["a"] == {"v": 2}


def test_an_io_error_on_the_directory_fsync_reports_unknown_durability_without_rollback(paths: Paths) -> None:
    seed(paths, {"a": {"v": 1}})
    store = Store(paths, fault=fail_at("dirfsync"))
    with pytest.raises(StoreWriteError, match="in place but may not survive"):
        with store.transaction() as doc:
            doc["jobs"]["a"] = {"v": 2}
    assert store.read()["jobs"]["a"] == {"v": 2}
    assert store.read()["rev"] == 2
    assert store.last_written_rev == 2
    assert temp_files(paths) == []


def test_an_injected_full_disk_at_write_is_reported_and_not_retried(paths: Paths) -> None:
    original = seed(paths, {"a": {}})
    reached: list[str] = []

    def fault(step: str) -> None:
        reached.append(step)
        if step == "write":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(StoreWriteError, match=r"No space left on device.*the store was not changed"):
        with Store(paths, fault=fault).transaction() as doc:
            doc["jobs"]["b"] = {}
    assert reached == ["open", "write"]
    assert paths.store.read_bytes() == original
    assert temp_files(paths) == []


def test_the_fault_hook_sees_every_step_in_order(paths: Paths) -> None:
    seed(paths, {"a": {}})
    reached: list[str] = []
    with Store(paths, fault=reached.append).transaction() as doc:
        doc["jobs"]["b"] = {}
    assert tuple(reached) == WRITE_STEPS


# --- a store that does not parse ----------------------------------------------------


@pytest.mark.parametrize(
    ("content", "detail"),
    [
        (b'{"version": 1, "jobs": {', "line 1 column 25"),
        (b"", "line 1 column 1"),
        (b'{"version": 1}\n\x00garbage', "Extra data at line 2 column 1"),
        (b'{"version": 1, "jobs": {"\xff": 1}}', "not valid UTF-8 at byte 25"),
    ],
)
def test_a_store_that_does_not_parse_is_reported_and_never_overwritten(
    paths: Paths, content: bytes, detail: str
) -> None:
    paths.store.write_bytes(content)
    store = Store(paths)
    with pytest.raises(StoreCorruptError) as caught:
        store.read()
    message = str(caught.value)
    assert f"cannot parse store {paths.store}" in message
    assert detail in message
    assert "cronctl doctor" in message and "no backup" in message  # nothing was written yet, so no .bak

    body_ran = False
    with pytest.raises(StoreCorruptError):
        with store.transaction() as doc:
            body_ran = True
            doc["jobs"] = {}
    assert not body_ran
    assert paths.store.read_bytes() == content
    assert temp_files(paths) == []


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ([], "the top level is a JSON array, not an object"),
        ({"jobs": {}}, 'no "version" key'),
        ({"version": "1", "jobs": {}}, '"version" must be a non-negative integer'),
        ({"version": True, "jobs": {}}, '"version" must be a non-negative integer'),
        ({"version": 1, "jobs": []}, '"jobs" must be an object, not array'),
        ({"version": 1}, 'no "jobs" object'),
        ({"version": 1, "jobs": {}, "counters": None}, '"counters" must be an object, not null'),
        ({"version": 1, "jobs": {}, "rev": -1}, '"rev" must be a non-negative integer'),
    ],
)
def test_a_document_of_the_wrong_shape_is_corrupt(paths: Paths, doc: Any, problem: str) -> None:
    paths.store.write_text(json.dumps(doc))
    with pytest.raises(StoreCorruptError, match="is not a cronctl store") as caught:
        Store(paths).read()
    assert problem in str(caught.value)
    assert str(paths.store) in str(caught.value)


# --- versions --------------------------------------------------------------------------

VERSION_0_FIXTURE = {
    # Version 0, before the first release: no "rev" and no "counters".
    "version": 0,
    "jobs": {"backup": {"schedule": "0 3 * * *", "command": "backup.sh", "state": {"last_status": None}}},
}


def test_a_version_0_store_is_upgraded_on_read_and_written_as_current(paths: Paths) -> None:
    paths.store.write_text(json.dumps(VERSION_0_FIXTURE))
    store = Store(paths)
    upgraded = store.read()
    assert upgraded == {"version": CURRENT_VERSION, "rev": 0, "counters": {}, "jobs": VERSION_0_FIXTURE["jobs"]}
    with store.transaction() as doc:
        doc["counters"]["run"] = 1
    on_disk = json.loads(paths.store.read_text())
    assert on_disk["version"] == CURRENT_VERSION and on_disk["rev"] == 1
    assert on_disk["jobs"] == VERSION_0_FIXTURE["jobs"]
    assert json.loads(paths.store_backup.read_text()) == VERSION_0_FIXTURE


def test_migrate_keeps_a_current_document_as_it_is() -> None:
    doc = {"version": 1, "rev": 7, "jobs": {"a": {}}, "counters": {"run": 3}}
    assert migrate(dict(doc), "jobs.json") == doc


def test_migrate_fills_in_keys_an_operator_may_have_dropped() -> None:
    assert migrate({"version": 1, "jobs": {}}, "jobs.json") == empty_document()


def test_a_store_from_a_newer_cronctl_is_refused_and_left_alone(paths: Paths) -> None:
    content = json.dumps({"version": CURRENT_VERSION + 1, "rev": 9, "jobs": {}, "shiny": True}).encode()
    paths.store.write_bytes(content)
    store = Store(paths)
    expected = f"written by a newer cronctl (version {CURRENT_VERSION + 1}); upgrade cronctl"
    with pytest.raises(StoreError, match=re.escape(expected)) as caught:
        store.read()
    assert not isinstance(caught.value, StoreCorruptError)
    with pytest.raises(StoreError, match=re.escape(expected)):
        with store.transaction() as doc:
            doc["jobs"]["a"] = {}
    assert paths.store.read_bytes() == content


def test_a_negative_version_is_corrupt() -> None:
    with pytest.raises(StoreCorruptError, match='"version" must be a non-negative integer'):
        migrate({"version": -1, "jobs": {}}, "jobs.json")


# --- a stateful model -----------------------------------------------------------------

names = st.sampled_from(["a", "b", "c"])
values = st.one_of(st.integers(-3, 3), st.text(max_size=3), st.none())


class StoreModel(RuleBasedStateMachine):
    """Any mix of changes, no-ops, aborted bodies and failed writes keeps disk equal to a plain dict."""

    def __init__(self) -> None:
        super().__init__()
        self.home = Path(tempfile.mkdtemp(prefix="cronctl-store-model-"))
        self.paths = Paths(self.home)
        self.store = Store(self.paths)
        self.jobs: dict[str, Any] = {}
        self.rev = 0
        self.previous: bytes | None = None  # what the backup must hold

    def teardown(self) -> None:
        shutil.rmtree(self.home, ignore_errors=True)

    def _committed(self) -> None:
        self.rev += 1

    def _remember_current(self) -> None:
        if self.paths.store.exists():
            self.previous = self.paths.store.read_bytes()

    @rule(name=names, value=values)
    def put(self, name: str, value: Any) -> None:
        changed = self.jobs.get(name) != {"v": value}
        if changed:
            self._remember_current()
        with self.store.transaction() as doc:
            doc["jobs"][name] = {"v": value}
        self.jobs[name] = {"v": value}
        if changed:
            self._committed()

    @rule(name=names)
    def delete(self, name: str) -> None:
        changed = name in self.jobs
        if changed:
            self._remember_current()
        with self.store.transaction() as doc:
            doc["jobs"].pop(name, None)
        self.jobs.pop(name, None)
        if changed:
            self._committed()

    @rule(name=names, value=values)
    def abort(self, name: str, value: Any) -> None:
        with pytest.raises(KeyError):
            with self.store.transaction() as doc:
                doc["jobs"][name] = {"v": value}
                raise KeyError(name)

    @rule(name=names, step=st.sampled_from(WRITE_STEPS[:-1]))
    def failed_write(self, name: str, step: str) -> None:
        failing = Store(self.paths, fault=fail_at(step))
        with pytest.raises(StoreWriteError):
            with failing.transaction() as doc:
                doc["jobs"][name] = {"v": "never"}
        if step == "rename" and self.paths.store.exists():
            # The backup step ran: the backup is now the current, still good, document.
            self._remember_current()

    @rule()
    def reopen(self) -> None:
        self.store = Store(self.paths)

    @invariant()
    def disk_matches_the_model(self) -> None:
        doc = self.store.read()
        assert doc["jobs"] == self.jobs
        assert doc["rev"] == self.rev
        assert temp_files(self.paths) == []
        if self.previous is not None:
            assert self.paths.store_backup.read_bytes() == self.previous


TestStoreModel = StoreModel.TestCase
TestStoreModel.settings = settings(max_examples=50, stateful_step_count=12, deadline=None)


def test_a_corrupt_store_message_names_the_backup_when_one_exists(tmp_path: Path) -> None:
    from cronctl.errors import StoreCorruptError
    from cronctl.paths import open_home

    paths = open_home(tmp_path / "home")
    store = Store(paths)
    for value in (1, 2):
        with store.transaction() as doc:
            doc["counters"]["n"] = value
    paths.store.write_text("{broken")
    with pytest.raises(StoreCorruptError) as info:
        store.read()
    assert f"'cronctl doctor --repair' restores the last good copy {paths.store_backup}" in str(info.value)
