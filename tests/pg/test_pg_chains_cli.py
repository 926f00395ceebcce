"""Job chains on PostgreSQL through the real CLI (SPEC §10): `add --after`, `apply` of a chain,
`force-run` of a root (its chain runs here when no loop is live), `force-run NODE --chain`,
`history --chain`, `show` and `status` read the chain rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # real children run


def chain_file(tmp_path: Path, out: Path, b_exit: int = 0) -> Path:
    """a -> b -> c, and e after a whatever b does; each writes its chain id to out/NAME."""
    out.mkdir()

    def note(name: str) -> str:
        return f'echo "$CRONCTL_CHAIN_ID" >> {out / name}'

    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(f"""jobs:
  - {{name: a, every: 1h, command: '{note("a")}'}}
  - {{name: b, after: a, command: '{note("b")}; exit {b_exit}'}}
  - {{name: c, after: b, command: '{note("c")}'}}
  - {{name: e, after: a, requires: done, command: '{note("e")}'}}
""")
    return jobs


def ids(out: Path, name: str) -> list[str]:
    return (out / name).read_text().splitlines() if (out / name).exists() else []


def test_apply_and_force_run_of_a_root_run_its_chain_here(cli: Any, store_url: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    applied = cli("--store", store_url, "apply", "-f", str(chain_file(tmp_path, out, b_exit=4)))
    assert applied.code == 0, applied.err
    done = cli("--store", store_url, "force-run", "a", "--wait")
    assert done.code == 4, done.out + done.err
    lines = done.out.splitlines()
    assert [line.split()[:2] for line in lines[:4]] == [["a", "success"], ["b", "error"], ["c", "skipped"],
                                                        ["e", "success"]], done.out
    assert "(upstream_failed: b)" in lines[2] and " failed (ended " in lines[-1]
    chain = lines[-1].split()[1].rstrip(":")
    assert ids(out, "a") == ids(out, "b") == ids(out, "e") == [chain] and ids(out, "c") == []
    report = cli("--store", store_url, "history", "--chain", chain, "--json").json()
    assert (report["outcome"], [node["status"] for node in report["nodes"]]) == \
        ("failed", ["success", "error", "skipped", "success"])
    assert [run["job"] for run in report["runs"]] == ["a", "b", "c", "e"] and all(r["host"] for r in report["runs"])
    shown = cli("--store", store_url, "show", "b")
    assert shown.code == 0 and f"last chain {chain}: failed" in shown.out, shown.out
    status = cli("--store", store_url, "status", "--json").json()
    assert {job["name"]: job["last_status"] for job in status["jobs"]}["c"] == "skipped"
    metrics = cli("--store", store_url, "metrics").out
    assert 'cronctl_chains_total{outcome="failed"} 1.0' in metrics and "cronctl_chains_in_progress 0.0" in metrics, \
        metrics


def test_add_after_and_force_run_of_a_node_with_chain(cli: Any, store_url: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    assert cli("--store", store_url, "add", "a", "--every", "1h", "--", "true").code == 0
    added = cli("--store", store_url, "add", "b", "--after", "a", "--", f'echo "$CRONCTL_CHAIN_ID" >> {out}/b')
    assert added.code == 0, added.err
    assert cli("--store", store_url, "add", "c", "--after", "b", "--", f'echo "$CRONCTL_CHAIN_ID" >> {out}/c').code == 0
    done = cli("--store", store_url, "force-run", "b", "--chain", "--wait")
    assert done.code == 0, done.out + done.err
    chain = done.out.splitlines()[-1].split()[1].rstrip(":")
    assert ids(out, "b") == ids(out, "c") == [chain]
    assert [run["job"] for run in cli("--store", store_url, "history", "--chain", chain, "--json").json()["runs"]] \
        == ["b", "c"]
    cycle = cli("--store", store_url, "edit", "a", "--after", "c")
    assert cycle.code == 1 and "cycle" in cycle.err and "Traceback" not in cycle.err


def test_import_json_carries_the_chain_jobs_and_their_history(cli: Any, store_url: str, tmp_path: Path) -> None:
    """A home with chain history: chain runs (trigger `chain`) and a skipped node (state `skipped`)
    used to die in the runs table's checks; now the chains read the same on PostgreSQL."""
    out = tmp_path / "out"
    assert cli("apply", "-f", str(chain_file(tmp_path, out, b_exit=4))).code == 0
    assert cli("force-run", "a", "--wait").code == 4
    chain = cli("history", "a", "--json").json()["runs"][-1]["run_id"]
    on_json = cli("history", "--chain", chain, "--json").json()

    imported = cli("--store", store_url, "store", "import-json", "--json")
    assert imported.code == 0, imported.err
    assert (imported.json()["jobs"], imported.json()["records"]) == (4, 4)
    on_pg = cli("--store", store_url, "history", "--chain", chain, "--json").json()
    assert on_pg["outcome"] == on_json["outcome"] == "failed"
    assert on_pg["nodes"] == on_json["nodes"]
    assert [{k: v for k, v in run.items() if k != "host"} for run in on_pg["runs"]] == on_json["runs"]
    shown = cli("--store", store_url, "show", "a")
    assert f"last chain {chain}: failed" in shown.out, shown.out
    # The imported chain jobs run on as chains here.
    again = cli("--store", store_url, "force-run", "a", "--wait")
    assert again.code == 4 and again.out.splitlines()[2].split()[:2] == ["c", "skipped"], again.out
    assert cli("--store", store_url, "store", "import-json", "--replace").code == 0
    assert cli("--store", store_url, "history", "--chain", chain, "--json").json()["nodes"] == on_json["nodes"]
