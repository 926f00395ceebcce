"""The expansion limit of jobs files holds whether the text can share nodes (anchors: the
walk that remembers each node) or not (no "&": a plain count of the nodes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cronctl.errors import ConfigError
from cronctl.jobs import yamlfile

PATH = Path("/jobs.yaml")
# 1 document mapping + key + sequence + 3 jobs x (mapping + 3 keys + 3 values) = 24 nodes
TEXT = "jobs:\n" + "".join(f"  - name: j{i}\n    every: 1h\n    command: 'true'\n" for i in range(3))


@pytest.mark.parametrize("text", [TEXT, TEXT + "# a & in a comment: the walk with memory\n"])
def test_both_walks_count_the_same_nodes(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setattr(yamlfile, "MAX_EXPANDED_NODES", 24)
    assert len(yamlfile.parse_yaml(PATH, text)["jobs"]) == 3
    monkeypatch.setattr(yamlfile, "MAX_EXPANDED_NODES", 23)
    with pytest.raises(ConfigError, match="refused: its aliases expand"):
        yamlfile.parse_yaml(PATH, text)


def test_an_alias_bomb_is_still_refused() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 8)]
    with pytest.raises(ConfigError, match="alias bomb"):
        yamlfile.parse_yaml(PATH, "\n".join(lines) + "\n")
