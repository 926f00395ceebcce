"""A released schema version's statements never change (store/pg/schema.py): a database migrated
by it must mean the same as one migrated later, so a change is a new version, never an edit.
Pinned by a digest of each version's statements; a new version adds its line here."""

from __future__ import annotations

import hashlib

from cronctl.store.pg.schema import MIGRATIONS

RELEASED = {
    1: "9a0c8573f21cea64", 2: "e4b888ee8e54adec", 3: "5aea1c8d978b54aa", 4: "730e48a9507a6005",
    5: "ebecb568b3baf6d1", 6: "29fe55a81925b4a6", 7: "56897e95259ab1a1", 8: "afa6d7e2c1603093",
    9: "6eb477be759e6523", 10: "c9398c73a3509412",
}


def _digest(statements: tuple[str, ...]) -> str:
    return hashlib.sha256("\n;\n".join(statements).encode()).hexdigest()[:16]


def test_every_released_schema_version_is_as_it_was_released() -> None:
    changed = {version: _digest(MIGRATIONS[version - 1]) for version in RELEASED
               if _digest(MIGRATIONS[version - 1]) != RELEASED[version]}
    assert changed == {}, "a released schema version was edited: add a new version instead"
    assert len(MIGRATIONS) == len(RELEASED), "a new schema version: pin its digest in RELEASED"
