"""Every command on PostgreSQL gives what it gives on the JSON store (SPEC §9), driven as a user drives it.

One session of commands runs against a JSON home and against a fresh database (`--store`);
outputs are compared with instants, run ids, durations, pids, homes and `host` masked
(`host` must be there on PostgreSQL wherever a run is shown in JSON).
"""

from __future__ import annotations

import json
import re
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import pytest

from cronctl.clock import SystemClock
from cronctl.models import RunStatus
from cronctl.store.claims import Dispatched, Lease, Outcome, Owner
from cronctl.store.leases import RunEnd
from cronctl.store.pg.connect import connect, parse_store_url
from cronctl.store.pg.leases import PgLeaseStore
from tests.conftest import cronctl_bin, subprocess_env
from tests.pg.test_pg_cli import with_password

pytestmark = pytest.mark.timeout(180)

Cli = Callable[..., Any]

FILE_V1 = """jobs:
  - name: alpha
    every: 30m
    command: echo alpha
  - name: beta
    cron: "*/5 * * * *"
    command: [echo, beta]
"""
FILE_V2 = """jobs:
  - name: alpha
    every: 45m
    command: echo alpha
"""

_MASKS = (
    (re.compile(r"\d{8}T\d{6}-[0-9a-f]{8}"), "<RUN>"),
    (re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?"), "<T>"),
    (re.compile(r"\bin (\d+[dhms])+\b"), "in <AGE>"),
    (re.compile(r"\b(\d+[dhms])+ ago\b"), "<AGE> ago"),
    (re.compile(r"\b\d+\.\d+s\b"), "<DUR>"),
    (re.compile(r"\bpid[= ]\d+"), "pid <PID>"),
    (re.compile(r"\d(\.\d+)?e\+09"), "<EPOCH>"),
    (re.compile(r"(cronctl_job_last_duration_seconds\{[^}]*\}) \S+"), r"\1 <DUR>"),
)
# fence: its first number comes from the claim instant (store/claims.py next_fence).
_MASKED_KEYS = {"pid", "generation", "duration", "duration_s", "last_duration", "log", "fence"}
# PostgreSQL's addition (`host`, checked on its own) and the JSON store's outbox of a run's
# rows and hook (`pending`: PostgreSQL commits them with the run's end, it keeps none).
_LEFT_OUT = {"host", "pending"}


def mask_text(text: str, homes: tuple[Path, ...] = ()) -> str:
    for home in homes:
        text = text.replace(str(home), "<HOME>")
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text


def mask_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: "<M>" if key in _MASKED_KEYS else mask_json(item) for key, item in value.items()
                if key not in _LEFT_OUT}
    if isinstance(value, list):
        return [mask_json(item) for item in value]
    if isinstance(value, str):
        return mask_text(value)
    return value


def session(cli: Cli, jobs_file: Path) -> list[tuple[tuple[str, ...], int, str, str]]:
    """The same commands on whichever store `cli` uses; what each answered, masked."""
    steps: list[tuple[str, ...]] = [
        ("add", "tick", "--every", "1h", "--", "true"),
        ("add", "fail", "--every", "1h", "--", "sh -c 'echo oops; exit 3'"),
        ("add", "nightly", "--cron", "0 3 * * *", "--tz", "Europe/Paris", "--", "echo hi"),
        ("add", "tick", "--every", "1h", "--", "true"),  # exists: exit 1
        ("edit", "tick", "--every", "2h"),
        ("edit", "tick", "--every", "2h"),  # nothing changes
        ("pause", "nightly"), ("pause", "nightly"), ("resume", "nightly"),
        ("list",), ("list", "--json"), ("show", "tick"), ("show", "tick", "--json"),
        ("next", "nightly", "-n", "3", "--from", "2026-10-24T00:00:00+02:00", "--json"),
        ("apply", "-f", str(jobs_file), "--json"),
        ("force-run", "fail", "--wait"), ("force-run", "tick", "--wait", "--json"),
        ("history", "--json"), ("history",), ("logs", "fail"),
        ("status", "--json"), ("metrics",),
        ("validate", "-f", str(jobs_file), "--json"), ("apply", "-f", str(jobs_file), "--dry-run", "--json"),
        ("export", "--format", "crontab"), ("export", "--format", "systemd", "alpha"),
        ("import-crontab", str(jobs_file.with_name("crontab")), "--tz", "UTC", "--prefix", "cron",
         "-o", str(jobs_file.with_name("from-crontab.yaml")), "--apply", "--json"),
        ("remove", "tick"), ("remove", "tick"),
        ("edit", "nope", "--every", "1h"), ("add", "bad", "--every", "soon", "--", "true"),
        ("list", "--json"),
    ]
    jobs_file.with_name("crontab").write_text("*/10 * * * * echo from-cron\n")
    out = []
    for args in steps:
        if args[:2] == ("apply", "-f"):
            jobs_file.write_text(FILE_V1)
        result = cli(*args)
        out.append((args, result.code, _masked(args, result.out), mask_text(result.err)))
        if args[:2] == ("apply", "-f"):  # the same file changed: an update and a prune
            jobs_file.write_text(FILE_V2)
            again = cli("apply", "-f", str(jobs_file), "--prune", "--json")
            out.append((("apply", "--prune"), again.code, _masked(("--json",), again.out), mask_text(again.err)))
    return out


# The loop side of `status` is the cluster's on PostgreSQL (SPEC §9: every loop listed, and
# stale with jobs and no live loop): tests/pg/test_pg_loops_e2e.py checks it; here, the jobs.
CLUSTER_KEYS = ("loop", "loops", "loop_stale", "stale")


def _masked(args: tuple[str, ...], out: str) -> str:
    if "--json" in args:
        data = json.loads(out)
        if args[0] == "status":
            data = {key: value for key, value in data.items() if key not in CLUSTER_KEYS}
        return json.dumps(mask_json(data), sort_keys=True)
    return mask_text(out)


def _diff(expected: str, got: str) -> str:
    import difflib

    lines = difflib.unified_diff(expected.replace(", ", ",\n").splitlines(), got.replace(", ", ",\n").splitlines(),
                                 "json store", "postgres", lineterm="")
    return "\n".join(lines)


def audit_events(cli: Cli) -> list[tuple[str, str | None]]:
    return [(row["event"], row.get("job")) for row in cli("audit", "--json").json()["rows"]
            if not row["event"].startswith("store.")]


def doctor_levels(cli: Cli) -> tuple[int, dict[str, str]]:
    """Exit code and each check's level, of the checks both stores make."""
    result = cli("doctor", "--json")
    levels = {f["check"]: f["level"] for f in result.json()["findings"]}
    return result.code, {check: levels[check] for check in ("store", "jobs", "loop", "claims", "orphans", "runs",
                                                             "audit", "disk")}


@pytest.mark.slow
def test_every_command_answers_on_postgres_as_on_the_json_store(cli: Cli, store_url: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    jobs_file = tmp_path / "jobs.yaml"
    json_home, pg_home = tmp_path / "json-home", tmp_path / "pg-home"

    monkeypatch.setenv("CRONCTL_HOME", str(json_home))
    on_json = session(cli, jobs_file)
    json_audit, json_doctor = audit_events(cli), doctor_levels(cli)

    monkeypatch.setenv("CRONCTL_HOME", str(pg_home))
    monkeypatch.setenv("CRONCTL_STORE", with_password(store_url))  # the test server takes any password
    on_pg = session(cli, jobs_file)
    everything = "".join(out + err for _, _, out, err in on_pg) + json.dumps(cli("audit", "--json").json())
    assert "s3cret-pw" not in everything + cli("doctor").out

    for (args, *json_answer), (_, *pg_answer) in zip(on_json, on_pg, strict=True):
        if args == ("history",):  # PostgreSQL's addition: which host ran each run (issue 26), checked, then left out
            assert pg_answer[1].split()[:3] == ["JOB", "RUN", "HOST"], pg_answer[1]
            pg_answer[1] = re.sub(r"[0-9a-f]{32}  ", "", re.sub(r"HOST +", "", pg_answer[1], count=1))
        assert pg_answer == json_answer, (args, _diff(str(json_answer), str(pg_answer)))
    failed = [(args[:2], code) for args, code, _, _ in on_pg if code]
    assert failed == [(("add", "tick"), 1), (("force-run", "fail"), 3),
                      (("export", "--format"), 1),  # crontab has no `every`: said, exit 1, as on JSON
                      (("remove", "tick"), 1),
                      (("edit", "nope"), 1), (("add", "bad"), 1)]  # force-run --wait: the run's own code
    assert audit_events(cli) == json_audit
    assert doctor_levels(cli) == json_doctor
    repaired = cli("doctor", "--repair", "--json")  # nothing to restore here, no orphan: nothing done
    assert (repaired.code, repaired.json()["repaired"]) == (0, [])
    assert not (pg_home / "jobs.json").exists()  # the database is the store; the home keeps run logs


def test_a_run_shown_in_json_names_its_host_on_postgres(cli: Cli, store_url: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRONCTL_STORE", store_url)
    monkeypatch.setenv("CRONCTL_HOST_ID", "host-under-test")
    assert cli("add", "tick", "--every", "1h", "--", "echo hi").code == 0
    forced = cli("force-run", "tick", "--wait", "--json")
    assert forced.code == 0 and forced.json()["run"]["host"] == "host-under-test"
    assert [run["host"] for run in cli("history", "--json").json()["runs"]] == ["host-under-test"]


def rows(store_url: str) -> list[tuple[Any, ...]]:
    with connect(parse_store_url(store_url)) as conn:
        return conn.execute("SELECT name, spec, state, spec_version, paused, next_run_at, updated_at"
                            " FROM cronctl_jobs ORDER BY name").fetchall()


def audit_count(store_url: str) -> int:
    with connect(parse_store_url(store_url)) as conn:
        found = conn.execute("SELECT count(*) FROM cronctl_audit").fetchone()
    assert found is not None
    return int(found[0])


@pytest.mark.parametrize("args, message", [
    (("edit", "nope", "--every", "1h"), "no job named 'nope'"),
    (("pause", "nope"), "no job named 'nope'"),
    (("remove", "nope"), "no job named 'nope'"),
    (("force-run", "nope"), "no job named 'nope'"),
    (("edit", "tick", "--every", "soon"), "--every"),
    (("add", "other", "--cron", "61 * * * *", "--", "true"), "--cron"),
    (("add", "tick", "--every", "1h", "--", "true"), "job 'tick' already exists"),
    (("add", "chained", "--after", "nope", "--", "true"), "unknown upstream job"),
    (("edit", "tick", "--after", "tick"), "after"),
])
def test_bad_input_changes_nothing_in_the_database(cli: Cli, store_url: str, monkeypatch: pytest.MonkeyPatch,
                                                   args: tuple[str, ...], message: str) -> None:
    monkeypatch.setenv("CRONCTL_STORE", store_url)
    assert cli("add", "tick", "--every", "1h", "--", "true").code == 0
    before, audited = rows(store_url), audit_count(store_url)
    refused = cli(*args)
    assert refused.code == 1 and message in refused.err, refused
    assert "Traceback" not in refused.err + refused.out
    assert rows(store_url) == before
    assert audit_count(store_url) == audited


def test_the_same_bad_input_says_the_same_on_both_stores(cli: Cli, store_url: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    bad = [("edit", "nope", "--every", "1h"), ("edit", "tick", "--overlap", "sometimes"),
           ("add", "x", "--every", "1h", "--timeout", "forever", "--", "true"), ("show", "nope"),
           ("resume", "nope"), ("history", "nope"), ("logs", "tick")]
    answers = []
    for store in (None, store_url):
        monkeypatch.setenv("CRONCTL_HOME", str(tmp_path / ("pg" if store else "json")))
        if store:
            monkeypatch.setenv("CRONCTL_STORE", store)
        assert cli("add", "tick", "--every", "1h", "--", "true").code == 0
        answers.append([(cli(*args).code, cli(*args).err) for args in bad])
    assert answers[0] == answers[1]
    assert all(code == 1 for code, _ in answers[1])


@pytest.mark.slow
def test_concurrent_adds_of_different_jobs_all_land(store_url: str, tmp_path: Path) -> None:
    env = {**subprocess_env(tmp_path / "home"), "CRONCTL_STORE": store_url}
    names = [f"job{i}" for i in range(8)]
    procs = [subprocess.Popen([*cronctl_bin(), "add", name, "--every", "1h", "--", "true"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in names]
    answers = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * len(names), answers
    assert [row[0] for row in rows(store_url)] == names
    with connect(parse_store_url(store_url)) as conn:
        added = conn.execute("SELECT job FROM cronctl_audit WHERE event = 'job.added' ORDER BY job").fetchall()
    assert [row[0] for row in added] == names


def test_a_definition_change_bumps_the_spec_version_and_never_moves_last_slot(cli: Cli, store_url: str,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRONCTL_STORE", store_url)
    assert cli("add", "tick", "--every", "1h", "--", "true").code == 0
    with connect(parse_store_url(store_url)) as conn:
        conn.execute("UPDATE cronctl_jobs SET last_slot = '2030-01-01T00:00:00Z'")
        conn.commit()
    assert cli("pause", "tick").code == 0  # a state change: the spec's version stays
    assert cli("edit", "tick", "--every", "2h").code == 0
    with connect(parse_store_url(store_url)) as conn:
        row = conn.execute("SELECT spec_version, last_slot::text, spec->>'every', paused FROM cronctl_jobs").fetchone()
    assert row == (2, "2030-01-01 00:00:00+00", "2h", True)


REMOTE = Owner("gen-remote", 4242, 1.0, "a-boot-of-another-host")


def remote_run(store_url: str, job: str, lease_s: float, output: str | None = None) -> str:
    """A run of `job` by a loop on host-b (another boot); ended with `output` when given."""
    with connect(parse_store_url(store_url)) as conn:
        leases = PgLeaseStore(conn, "host-b", clock=SystemClock())
        lease = Lease(0.0, datetime.now(timezone.utc) + timedelta(seconds=lease_s))
        [run] = leases.claim_force(job, leases.db_now(), REMOTE, lease).claims
        leases.mark_dispatched(REMOTE, [Dispatched(job, run.run_id, 4242, 1.0, 0.0)], leases.db_now())
        if output is not None:
            end = RunEnd(run.run_id, Outcome(RunStatus.SUCCESS, None, exit_code=0, output_tail=output), job)
            leases.finish_many(REMOTE, [end], leases.db_now())
    return run.run_id


def test_logs_of_a_run_of_another_host_show_its_stored_tail_and_name_the_host(
        cli: Cli, store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRONCTL_STORE", store_url)
    assert cli("add", "tick", "--every", "1h", "--", "true").code == 0
    run_id = remote_run(store_url, "tick", 60.0, output="remote says hi\n")
    shown = cli("logs", "tick")
    assert (shown.code, shown.out) == (0, "remote says hi\n")
    assert "host-b" in shown.err and run_id in shown.err
    assert cli("logs", "tick", "--run", "19990101T000000-00000000").code == 1
    running = remote_run(store_url, "tick", 60.0)
    elsewhere = cli("logs", "tick")
    assert elsewhere.code == 1 and f"run {running} of job 'tick' is running on another host" in elsewhere.err


def test_kill_leaves_a_run_of_another_host_to_that_host(cli: Cli, store_url: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRONCTL_STORE", store_url)
    assert cli("add", "tick", "--every", "1h", "--", "true").code == 0
    run_id = remote_run(store_url, "tick", 60.0)
    refused = cli("kill", "tick")
    assert refused.code == 1 and "another host" in refused.err and run_id in refused.err
    assert cli("show", "tick", "--json").json()["state"]["claims"][run_id]["host"] == "host-b"
    assert cli("status", "--json").json()["jobs"][0]["running"] == [run_id]


@pytest.mark.parametrize("lease_s, level", [(60.0, "ok"), (-30.0, "action")])
def test_doctor_judges_a_run_of_another_host_by_its_lease(cli: Cli, store_url: str, monkeypatch: pytest.MonkeyPatch,
                                                          lease_s: float, level: str) -> None:
    monkeypatch.setenv("CRONCTL_STORE", store_url)
    assert cli("add", "tick", "--every", "1h", "--", "true").code == 0
    run_id = remote_run(store_url, "tick", lease_s)
    found = cli("doctor", "--json")
    claims = [f for f in found.json()["findings"] if f["check"] == "claims"]
    assert [f["level"] for f in claims] == [level]
    if level == "action":
        assert run_id in claims[0]["message"] and "lease expired" in claims[0]["message"] and found.code == 1


def test_force_run_takes_over_a_dead_run_of_another_host_but_never_a_live_one(
        cli: Cli, store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRONCTL_STORE", store_url)
    assert cli("add", "tick", "--every", "1h", "--", "true").code == 0
    live = remote_run(store_url, "tick", 60.0)
    busy = cli("force-run", "tick")
    assert busy.code == 1 and "is running" in busy.err
    assert cli("status", "--json").json()["jobs"][0]["running"] == [live]
    with connect(parse_store_url(store_url)) as conn:  # its lease ran out long ago: host-b is gone
        conn.execute("UPDATE cronctl_runs SET claim = jsonb_set(claim, '{lease_until}', "
                     "'\"2000-01-01T00:00:00.000+00:00\"') WHERE run_id = %s", (live,))
        conn.commit()
    taken = cli("force-run", "tick", "--wait")
    assert taken.code == 0, taken.err
    statuses = [(run["run_id"] == live, run["status"]) for run in cli("history", "--json").json()["runs"]]
    assert statuses == [(True, "lost"), (False, "success")]


@pytest.mark.slow
def test_concurrent_adds_of_one_name_land_once_and_the_other_is_told(store_url: str, tmp_path: Path) -> None:
    env = {**subprocess_env(tmp_path / "home"), "CRONCTL_STORE": store_url}
    procs = [subprocess.Popen([*cronctl_bin(), "add", "same", "--every", f"{minutes}m", "--", "true"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for minutes in (5, 7)]
    answers = [proc.communicate(timeout=60) for proc in procs]
    assert sorted(proc.returncode for proc in procs) == [0, 1], answers
    assert any("job 'same' already exists" in err for _, err in answers)
    assert [row[0] for row in rows(store_url)] == ["same"]


@pytest.mark.slow
def test_every_json_output_on_postgres_matches_its_schema(cli: Cli, store_url: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.cli.test_json_schemas import check

    monkeypatch.setenv("CRONCTL_STORE", store_url)
    jobs_file = tmp_path / "jobs.yaml"
    jobs_file.write_text(FILE_V1)
    assert cli("apply", "-f", str(jobs_file)).code == 0
    outputs = {
        "force-run": cli("force-run", "alpha", "--wait", "--json"),
        "list": cli("list", "--json"), "job": cli("show", "alpha", "--json"), "status": cli("status", "--json"),
        "history": cli("history", "--json"), "next": cli("next", "-n", "3", "--json"),
        "apply": cli("apply", "-f", str(jobs_file), "--dry-run", "--json"), "audit": cli("audit", "--json"),
        "doctor": cli("doctor", "--json"),
    }
    for name, result in outputs.items():
        assert result.code in (0, 1), (name, result.err)
        check(name, result.json())
    assert outputs["force-run"].json()["run"]["host"] and outputs["history"].json()["runs"][0]["host"]
