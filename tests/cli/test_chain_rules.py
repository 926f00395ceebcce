"""Job chains, definitions side (SPEC §10): the graph rules of jobs/graph.py and the
errors of validate / apply / add / edit / remove / apply --prune."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from cronctl.jobs.graph import (
    descendants_of,
    find_cycle,
    graph_problems,
    orphaned_by,
    roots_of,
    topological,
    tree_lines,
)
from cronctl.models import JobSpec, Requires


def spec(name: str, *after: str, requires: Requires = Requires.SUCCESS) -> JobSpec:
    if after:
        return JobSpec(name=name, command="true", after=tuple(after), requires=requires)
    return JobSpec(name=name, command="true", cron="0 2 * * *")


def graph(*specs: JobSpec) -> dict[str, JobSpec]:
    return {s.name: s for s in specs}


def where(job: str, field: str) -> str:
    return f"job '{job}': field '{field}'"


DIAMOND = graph(spec("a"), spec("b", "a"), spec("c", "a"), spec("d", "b", "c"))


# --- graph rules -------------------------------------------------------------------------


def test_a_diamond_is_valid_and_ordered_upstream_first() -> None:
    assert graph_problems(DIAMOND, where) == []
    assert descendants_of("a", DIAMOND) == ["b", "c", "d"]
    assert descendants_of("b", DIAMOND) == ["d"]
    assert topological(["d", "c", "b", "a"], DIAMOND) == ["a", "b", "c", "d"]
    assert roots_of("d", DIAMOND) == {"a"}


def test_a_cycle_is_named_in_the_order_the_jobs_run() -> None:
    specs = graph(spec("a"), spec("x", "z"), spec("y", "x"), spec("z", "y"))
    cycle = find_cycle(specs)
    assert cycle is not None and set(cycle) == {"x", "y", "z"} and cycle[0] == cycle[-1]
    problems = graph_problems(specs, where)
    assert len(problems) == 1
    assert "the jobs form a cycle: x -> y -> z -> x" in problems[0]


def test_a_job_after_itself_is_refused() -> None:
    assert graph_problems(graph(spec("a", "a")), where) == ["job 'a': field 'after': a job cannot run after itself"]


def test_an_unknown_upstream_is_named() -> None:
    problems = graph_problems(graph(spec("a"), spec("b", "a", "nope")), where)
    assert problems == ["job 'b': field 'after': unknown upstream job(s) nope"]


def test_upstreams_from_different_roots_are_refused() -> None:
    specs = graph(spec("a"), spec("r"), spec("b", "a"), spec("c", "r"), spec("d", "b", "c"))
    problems = graph_problems(specs, where)
    assert problems == ["job 'd': field 'after': its upstreams descend from different roots (a, r); "
                        "a chain starts at one scheduled job"]


def test_only_judged_jobs_are_blamed() -> None:
    specs = graph(spec("a"), spec("b", "gone"), spec("c", "a"))
    assert graph_problems(specs, where, judged=["c"]) == []
    assert len(graph_problems(specs, where, judged=["b"])) == 1


def test_orphans_name_the_upstream_and_the_dependants_left_behind() -> None:
    assert orphaned_by({"b"}, DIAMOND) == {"b": ["d"]}
    assert orphaned_by({"b", "c", "d"}, DIAMOND) == {}
    assert orphaned_by({"a"}, DIAMOND) == {"a": ["b", "c"]}


def test_the_tree_draws_a_shared_dependant_once() -> None:
    lines = tree_lines("a", DIAMOND, lambda name: name.upper())
    assert lines == ["A", "├── B", "│   └── D", "└── C", "    └── d (see above)"]


def test_a_dependant_keeps_the_store_format_of_a_plain_job_unchanged() -> None:
    plain = spec("a").to_dict()
    assert "after" not in plain and "requires" not in plain
    chained = spec("d", "b", "c", requires=Requires.DONE)
    data = chained.to_dict()
    assert data["after"] == ["b", "c"] and data["requires"] == "done"
    assert JobSpec.from_dict(data) == chained
    assert chained.schedule_text == "after b, c"


# --- the commands --------------------------------------------------------------------------


def write(tmp_path: Path, text: str, name: str = "jobs.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


CHAIN_YAML = """\
    jobs:
      - name: a
        cron: "0 2 * * *"
        command: "true"
      - name: b
        after: a
        command: "true"
      - name: c
        after: [a]
        command: "true"
      - name: d
        after: [b, c]
        requires: done
        command: "true"
"""


def test_validate_accepts_a_chain(cli: Any, tmp_path: Path) -> None:
    result = cli("validate", "-f", str(write(tmp_path, CHAIN_YAML)))
    assert result.code == 0, result.err
    assert "4 job(s) valid: a, b, c, d" in result.out


@pytest.mark.parametrize(("yaml_text", "message"), [
    ("""\
    jobs:
      - {name: a, cron: "0 2 * * *", command: "true"}
      - {name: x, after: z, command: "true"}
      - {name: y, after: x, command: "true"}
      - {name: z, after: y, command: "true"}
    """, "job 'x': field 'after': the jobs form a cycle: x -> y -> z -> x"),
    ("""\
    jobs:
      - {name: a, cron: "0 2 * * *", command: "true"}
      - {name: b, after: [a, ghost], command: "true"}
    """, "job 'b': field 'after': unknown upstream job(s) ghost"),
    ("""\
    jobs:
      - {name: a, cron: "0 2 * * *", command: "true"}
      - {name: b, after: a, every: 5m, command: "true"}
    """, "job 'b': field 'after': a job runs after other jobs or on a schedule, not both (found every, after)"),
    ("""\
    jobs:
      - {name: a, cron: "0 2 * * *", command: "true"}
      - {name: r, every: 1h, command: "true"}
      - {name: b, after: [a, r], command: "true"}
    """, "job 'b': field 'after': its upstreams descend from different roots (a, r)"),
    ("""\
    jobs:
      - {name: a, cron: "0 2 * * *", command: "true", requires: done}
    """, "job 'a': field 'requires': only applies to a job with 'after'"),
    ("""\
    jobs:
      - {name: a, cron: "0 2 * * *", command: "true"}
      - {name: b, after: a, requires: sometimes, command: "true"}
    """, "job 'b': field 'requires': 'sometimes' is not one of success | done"),
])
def test_validate_and_apply_name_file_job_and_field(cli: Any, tmp_path: Path, yaml_text: str, message: str) -> None:
    path = write(tmp_path, yaml_text)
    for command in ("validate", "apply"):
        result = cli(command, "-f", str(path))
        assert result.code == 1, (command, result.out)
        assert str(path) in result.err and message in result.err, result.err
        assert "Traceback" not in result.err


def test_add_and_edit_take_after_and_requires(cli: Any) -> None:
    assert cli("add", "a", "--cron", "0 2 * * *", "--", "true").code == 0
    assert cli("add", "b", "--after", "a", "--", "true").code == 0
    added = cli("add", "d", "--after", "a", "--after", "b", "--requires", "done", "--", "true")
    assert added.code == 0, added.err
    shown = cli("show", "d", "--json").json()
    assert shown["after"] == ["a", "b"] and shown["requires"] == "done"
    bad = cli("add", "e", "--after", "ghost", "--", "true")
    assert bad.code == 1 and "job 'e': --after: unknown upstream job(s) ghost" in bad.err
    cycle = cli("edit", "a", "--after", "d")
    assert cycle.code == 1 and "cycle" in cycle.err and "--after" in cycle.err
    # b back on a schedule would make it a second root of d: refused, naming d.
    split = cli("edit", "b", "--cron", "0 3 * * *")
    assert split.code == 1 and "job 'd': --after: its upstreams descend from different roots (a, b)" in split.err
    assert cli("edit", "d", "--after", "b").code == 0
    assert cli("edit", "b", "--cron", "0 3 * * *").code == 0  # now b is d's one root
    assert cli("show", "b", "--json").json()["cron"] == "0 3 * * *"


def test_remove_refuses_to_orphan_a_dependant_unless_forced(cli: Any) -> None:
    cli("add", "a", "--cron", "0 2 * * *", "--", "true")
    cli("add", "b", "--after", "a", "--", "true")
    refused = cli("remove", "a")
    assert refused.code == 1
    assert "removing a would orphan dependant job(s): b run(s) after a" in refused.err
    assert cli("remove", "a", "--force").code == 0


def test_apply_prune_refuses_to_orphan_a_dependant_unless_forced(cli: Any, tmp_path: Path) -> None:
    path = write(tmp_path, CHAIN_YAML)
    assert cli("apply", "-f", str(path)).code == 0
    other = write(tmp_path, """\
    jobs:
      - {name: late, after: b, command: "true"}
    """, "other.yaml")
    assert cli("apply", "-f", str(other)).code == 0
    path.write_text(textwrap.dedent("""\
    jobs:
      - {name: a, cron: "0 2 * * *", command: "true"}
    """))
    refused = cli("apply", "-f", str(path), "--prune")
    assert refused.code == 1
    assert "apply --prune would orphan dependant job(s): late run(s) after b" in refused.err
    forced = cli("apply", "-f", str(path), "--prune", "--force")
    assert forced.code == 0, forced.err
    assert sorted(j["name"] for j in cli("list", "--json").json()["jobs"]) == ["a", "late"]


# --- exports ---------------------------------------------------------------------------------


def test_systemd_maps_a_single_success_edge_to_on_success_and_lists_the_rest() -> None:
    from datetime import datetime, timezone

    from cronctl.interop.export.formats import export_jobs

    now = datetime(2026, 3, 1, tzinfo=timezone.utc)
    specs = [*DIAMOND.values(), spec("e", "a", requires=Requires.DONE)]
    result = export_jobs(specs, "systemd", now)
    files = {f.name: f.text for f in result.files}
    assert "OnSuccess=cronctl-b.service cronctl-c.service\n" in files["cronctl-a.service"]
    assert "cronctl-b.timer" not in files and "cronctl-d.timer" not in files and "cronctl-a.timer" in files
    assert "started by OnSuccess= of cronctl-a.service" in result.notes["b"][0]
    assert "after b, c (requires success): not translatable" in result.notes["d"][0]
    assert "after a (requires done): not translatable" in result.notes["e"][0]
    # A unit nothing would start is not written: listed, and the export is partial (exit 1).
    assert result.omitted == ["d", "e"]
    assert not any(name.startswith(("cronctl-d.", "cronctl-e.")) for name in files)


def test_systemd_strands_what_hangs_below_an_untranslatable_edge_or_an_unexported_upstream() -> None:
    from datetime import datetime, timezone

    from cronctl.interop.export.formats import export_jobs

    now = datetime(2026, 3, 1, tzinfo=timezone.utc)
    specs = [*DIAMOND.values(), spec("f", "d"), spec("g", "b")]
    result = export_jobs(specs, "systemd", now)
    files = {f.name: f.text for f in result.files}
    assert result.omitted == ["d", "f"]
    assert "nothing starts d in systemd, so nothing starts this one" in result.notes["f"][0]
    assert "OnSuccess=cronctl-g.service\n" in files["cronctl-b.service"]
    assert "\nOnSuccess=" not in files["cronctl-c.service"], "no edge to a unit that is not written"
    alone = export_jobs([DIAMOND["b"]], "systemd", now)
    assert alone.omitted == ["b"] and "a is not in this export" in alone.notes["b"][0]


def test_export_of_an_untriggerable_chain_exits_1_unless_allow_partial(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  - {name: a, every: 1h, command: 'true'}\n"
                    "  - {name: b, after: a, requires: done, command: 'true'}\n")
    refused = cli("export", "--format", "systemd", "-f", str(jobs))
    assert refused.code == 1 and "b" in refused.err and "not translatable" in refused.err
    assert cli("export", "--format", "systemd", "-f", str(jobs), "--allow-partial").code == 0


@pytest.mark.parametrize("fmt", ["crontab", "kubernetes"])
def test_crontab_and_kubernetes_list_every_dependant_as_not_translatable(fmt: str) -> None:
    from datetime import datetime, timezone

    from cronctl.interop.export.formats import export_jobs

    result = export_jobs(list(DIAMOND.values()), fmt, datetime(2026, 3, 1, tzinfo=timezone.utc))
    assert result.omitted == ["b", "c", "d"]
    for name in ("b", "c", "d"):
        assert "not translatable" in result.notes[name][0]
