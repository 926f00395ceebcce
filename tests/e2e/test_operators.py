"""Jobs as operators run them (SPEC §13): user, env_file, limits, as real runs show them.

The end-to-end tests need root (CI runs as root): they switch users for real.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import cronctl_bin, subprocess_env

from cronctl.jobs.operatorfields import OperatorFieldProblem, check_limits, parse_size
from cronctl.proc.envfile import EnvFileError, parse_env_text, read_env_file

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root (CI runs as root)")


# --- env_file: systemd's EnvironmentFile= rules ---------------------------------------


def test_env_file_reads_comments_quotes_and_continuations_as_systemd_does() -> None:
    text = ("# a comment\n; another\nA=1\n  B = hello world  \nC='multi\nline'\n"
            'D="x \\" y \\$HOME \\n"\nE=a\\\nb\nF="q"tail\nno equals sign\n9BAD=1\nEMPTY=\n')
    assert parse_env_text(text) == {"A": "1", "B": "hello world", "C": "multi\nline", "D": 'x " y $HOME \\n',
                                    "E": "ab", "F": "qtail", "EMPTY": ""}


def test_a_missing_or_unreadable_env_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(EnvFileError, match="does not exist"):
        read_env_file(str(tmp_path / "nope"))
    with pytest.raises(EnvFileError, match="is a directory"):
        read_env_file(str(tmp_path))


def test_limits_and_sizes_are_stored_as_whole_numbers() -> None:
    assert parse_size("1MiB") == parse_size("1M") == 1 << 20
    assert parse_size(2048) == 2048
    assert check_limits({"cpu": "1m", "memory": "2G", "nofile": 16, "nice": 10}) == {
        "nice": 10, "memory": 2 << 30, "cpu": 60, "nofile": 16}
    for bad, words in (({"cpu": "500ms"}, "whole seconds"), ({"nice": 30}, "at most 19"),
                       ({"fd": 1}, "unknown limit"), ({"memory": "lots"}, "expected a size")):
        with pytest.raises(OperatorFieldProblem, match=words):
            check_limits(bad)


def test_bad_operator_fields_name_the_file_job_and_field(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  - name: a\n    every: 1m\n    command: echo\n    user: 'a b'\n"
                    "    env_file: relative/env\n    keep_runs: 0\n    limits: {nofile: many}\n")
    result = cli("validate", "-f", str(jobs))
    assert result.code == 1
    for field in ("user", "env_file", "keep_runs", "limits"):
        assert f"job 'a': field '{field}'" in result.err


def test_validate_warns_of_a_user_this_host_does_not_have(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  - name: a\n    every: 1m\n    command: echo\n    user: no-such-user-here\n")
    result = cli("validate", "-f", str(jobs))
    assert result.code == 0
    assert "no user 'no-such-user-here' on this host" in result.err
    added = cli("add", "b", "--every", "1m", "--user", "no-such-user-here", "--", "true")
    assert added.code == 0 and "job 'b': field 'user': no user 'no-such-user-here' on this host" in added.err


# --- real runs ------------------------------------------------------------------------


def _cronctl(home: Path, *args: str, user: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*user, *cronctl_bin(), *args], env=subprocess_env(home), capture_output=True,
                          text=True, timeout=90)


def _last_record(home: Path, job: str) -> dict[str, object]:
    lines = (home / "runs" / job / "history.jsonl").read_text().splitlines()
    record: dict[str, object] = json.loads(lines[-1])
    return record


def _apply(home: Path, tmp_path: Path, body: str) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n" + body)
    done = _cronctl(home, "apply", "-f", str(jobs))
    assert done.returncode == 0, done.stderr


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory any user may reach and write to (pytest's own tmp root is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="cronctl-operators-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@root_only
@pytest.mark.slow
def test_a_job_with_user_nobody_runs_as_nobody_with_its_home_and_names(home: Path, tmp_path: Path,
                                                                      shared_dir: Path) -> None:
    out = shared_dir / "made"
    _apply(home, tmp_path, f"  - name: as-nobody\n    every: 1h\n    user: nobody\n    command: 'touch {out}; "
                           "echo HOME=$HOME USER=$USER LOGNAME=$LOGNAME SHELL=$SHELL; id -u; id -G'\n")
    done = _cronctl(home, "force-run", "as-nobody", "--wait")
    assert done.returncode == 0, done.stdout + done.stderr
    import pwd

    nobody = pwd.getpwnam("nobody")
    assert out.stat().st_uid == nobody.pw_uid
    log = _cronctl(home, "logs", "as-nobody").stdout
    assert f"HOME={nobody.pw_dir} USER=nobody LOGNAME=nobody SHELL=/bin/sh" in log
    uid_line, groups_line = log.splitlines()[1:3]
    assert int(uid_line) == nobody.pw_uid
    assert set(map(int, groups_line.split())) == set(os.getgrouplist("nobody", nobody.pw_gid))
    # The run's log stays the loop's: written by root, private.
    log_file = next((home / "runs" / "as-nobody").glob("*.log"))
    assert log_file.stat().st_uid == 0 and log_file.stat().st_mode & 0o777 == 0o600


@root_only
@pytest.mark.slow
def test_an_unknown_user_ends_the_run_blocked_config_with_the_reason(home: Path, tmp_path: Path) -> None:
    _apply(home, tmp_path, "  - name: ghost\n    every: 1h\n    user: no-such-user-here\n    command: 'echo ran'\n")
    done = _cronctl(home, "force-run", "ghost", "--wait")
    assert done.returncode == 1
    record = _last_record(home, "ghost")
    assert (record["status"], record["reason"]) == ("not_started", "blocked_config")
    assert "user 'no-such-user-here' does not exist on this host" in str(record["output_tail"])
    assert "does not exist on this host" in _cronctl(home, "history", "ghost").stdout
    assert "does not exist on this host" in _cronctl(home, "status").stdout


@root_only
@pytest.mark.slow
def test_a_loop_that_is_not_root_cannot_switch_users_and_says_so(tmp_path: Path, shared_dir: Path) -> None:
    home = shared_dir / "home"
    _apply(home, tmp_path, f"  - name: as-root\n    every: 1h\n    user: root\n    command: 'touch {shared_dir}/x'\n")
    for path in [home, *home.rglob("*")]:
        os.chown(path, 65534, 65534)
    as_nobody = ("setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups")
    done = _cronctl(home, "force-run", "as-root", "--wait", user=as_nobody)
    assert done.returncode == 1, done.stdout + done.stderr
    record = _last_record(home, "as-root")
    assert (record["status"], record["reason"]) == ("not_started", "blocked_config")
    assert "not root" in str(record["output_tail"])
    assert not (shared_dir / "x").exists()


@root_only
@pytest.mark.slow
def test_env_file_values_reach_the_child_and_nowhere_else(home: Path, tmp_path: Path) -> None:
    env_file = tmp_path / "job.env"
    env_file.write_text('# the secret\nAPI_TOKEN="s3cr3t-value with space"\nCRONCTL_JOB=forged\n')
    env_file.chmod(0o600)  # readable by root only: the loop reads it, not the job's user
    _apply(home, tmp_path, f"  - name: with-env\n    every: 1h\n    user: nobody\n    env_file: {env_file}\n"
                           "    command: 'echo token=$API_TOKEN job=$CRONCTL_JOB'\n")
    done = _cronctl(home, "force-run", "with-env", "--wait")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "token=s3cr3t-value with space job=with-env" in _cronctl(home, "logs", "with-env").stdout
    for name in ("jobs.json", "audit.jsonl"):
        assert "s3cr3t" not in (home / name).read_text()
    assert "s3cr3t" not in _cronctl(home, "show", "with-env").stdout
    assert "s3cr3t" not in _cronctl(home, "show", "with-env", "--json").stdout
    env_file.unlink()
    assert _cronctl(home, "force-run", "with-env", "--wait").returncode == 1
    record = _last_record(home, "with-env")
    assert record["reason"] == "blocked_config" and "does not exist" in str(record["output_tail"])


@pytest.mark.slow
def test_a_cpu_limit_ends_a_busy_loop_with_the_cpu_limit_reason(home: Path, tmp_path: Path) -> None:
    _apply(home, tmp_path, "  - name: busy\n    every: 1h\n    limits: {cpu: 1s}\n    command: 'while :; do :; done'\n")
    done = _cronctl(home, "force-run", "busy", "--wait")
    assert done.returncode != 0
    record = _last_record(home, "busy")
    assert (record["status"], record["reason"]) == ("error", "cpu_limit")
    assert "CPU time limit" in _cronctl(home, "history", "busy").stdout


@pytest.mark.slow
def test_nofile_and_nice_limits_are_what_the_job_sees(home: Path, tmp_path: Path) -> None:
    _apply(home, tmp_path, "  - name: small\n    every: 1h\n    limits: {nofile: 16, nice: 7}\n"
                           "    command: 'ulimit -n; nice'\n")
    assert _cronctl(home, "force-run", "small", "--wait").returncode == 0
    assert _cronctl(home, "logs", "small").stdout.split()[:2] == ["16", "7"]


# --- retention ---------------------------------------------------------------------------


@pytest.mark.slow
def test_keep_runs_and_keep_log_are_the_jobs_own(home: Path, tmp_path: Path) -> None:
    _apply(home, tmp_path, "  - name: kept\n    every: 1h\n    keep_runs: 3\n    keep_log: 2KiB\n"
                           "    command: 'head -c 10000 /dev/zero | tr \"\\\\0\" x'\n")
    for _ in range(5):
        assert _cronctl(home, "force-run", "kept", "--wait").returncode == 0
    logs = sorted((home / "runs" / "kept").glob("*.log"))
    assert len(logs) == 3
    assert all(2048 <= log.stat().st_size < 2048 + 200 for log in logs)  # the cap and its one-line note
    assert "capped at 2048 bytes" in logs[-1].read_text()
    runs = json.loads(_cronctl(home, "history", "kept", "--json").stdout)["runs"]
    assert len(runs) == 5  # the history outlives the logs


def test_history_keeps_at_least_as_many_records_as_a_job_keeps_logs(tmp_path: Path) -> None:
    from cronctl.paths import Paths
    from cronctl.store import history

    paths = Paths(tmp_path)
    padding = "x" * 4000  # about a tail's worth per record: the byte bound is passed quickly
    for number in range(400):
        history.append_record(paths, {"job": "big", "run_id": f"r{number:04d}", "ended_at": f"{number:04d}",
                                      "output_tail": padding}, keep_runs=300)
    assert len(history.read_records(paths, "big")) >= 300
    for number in range(400):
        history.append_record(paths, {"job": "small", "run_id": f"r{number:04d}", "ended_at": f"{number:04d}",
                                      "output_tail": padding})
    assert len(history.read_records(paths, "small")) < 300


@pytest.mark.slow
def test_a_run_that_runs_out_of_its_memory_limit_says_so(home: Path, tmp_path: Path) -> None:
    python = os.path.realpath(sys.executable)
    _apply(home, tmp_path, f"  - name: hog\n    every: 1h\n    limits: {{memory: 256M}}\n"
                           f"    command: ['{python}', '-I', '-c', 'b = bytearray(1 << 30)']\n")
    assert _cronctl(home, "force-run", "hog", "--wait").returncode == 1
    record = _last_record(home, "hog")
    assert (record["status"], record["reason"]) == ("error", "memory_limit")
    assert "memory limit reached" in _cronctl(home, "history", "hog").stdout
    # Without a memory limit the same words are the job's own failure, not a limit's.
    _apply(home, tmp_path, "  - name: fits\n    every: 1h\n    command: 'echo out of memory; exit 3'\n")
    _cronctl(home, "force-run", "fits", "--wait")
    assert _last_record(home, "fits")["reason"] == "exit_code_nonzero"


@root_only
@pytest.mark.slow
def test_a_real_loop_run_as_nobody_ends_user_jobs_blocked_config(shared_dir: Path, tmp_path: Path) -> None:
    from tests.helpers.loophelp import stop, wait_until

    home = shared_dir / "loop-home"
    _apply(home, tmp_path, f"  - name: as-root\n    every: 1s\n    user: root\n    command: 'touch {shared_dir}/x'\n")
    for path in [home, *home.rglob("*")]:
        os.chown(path, 65534, 65534)
    loop = subprocess.Popen(["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups",
                             *cronctl_bin(), "run"], env=subprocess_env(home), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: (home / "runs" / "as-root" / "history.jsonl").exists(), 40)
    finally:
        stop(loop)
    record = _last_record(home, "as-root")
    assert (record["status"], record["reason"]) == ("not_started", "blocked_config")
    assert "the loop runs as nobody" in str(record["output_tail"]) and "not root" in str(record["output_tail"])
    assert not (shared_dir / "x").exists()


def test_exports_say_that_user_env_file_and_limits_were_not_exported(cli) -> None:  # type: ignore[no-untyped-def]
    assert cli("add", "op", "--every", "1h", "--user", "nobody", "--env-file", "/etc/default/op",
               "--limit", "nofile=16", "--", "true").code == 0
    for fmt in ("crontab", "systemd", "kubernetes"):
        notes = cli("export", "--format", fmt, "--json").json()["untranslated"]["op"]
        for field in ("user nobody", "env_file /etc/default/op", "limits nofile 16"):
            assert any(note.startswith(field + ": not exported") for note in notes), (fmt, field, notes)


@pytest.mark.slow
def test_the_setup_helper_fails_closed_with_its_marker_and_runs_nothing(tmp_path: Path) -> None:
    from cronctl.proc.become import MARKER, SETUP_FAILED
    from cronctl.proc.childsetup import BECOME_SCRIPT

    marker = tmp_path / "ran"
    helper = [sys.executable, "-I", "-S", BECOME_SCRIPT]
    bad = subprocess.run([*helper, "NOFILE=many", "--", "/bin/sh", "-c", f"touch {marker}"], capture_output=True,
                         text=True, timeout=30)
    assert bad.returncode == SETUP_FAILED and bad.stderr.startswith(MARKER) and "NOFILE" in bad.stderr
    assert not marker.exists()
    good = subprocess.run([*helper, "NOFILE=20:20,nice=3", "--", "/bin/sh", "-c",
                           "ulimit -n; nice; grep SigIgn /proc/self/status"],
                          capture_output=True, text=True, timeout=30)
    assert good.returncode == 0 and good.stdout.split()[:2] == ["20", "3"]
    ignored = int(good.stdout.split()[-1], 16)
    # Python ignores SIGPIPE and SIGXFSZ; the helper must not hand that down to the job.
    assert ignored & (1 << (signal.SIGPIPE - 1) | 1 << (signal.SIGXFSZ - 1)) == 0


def test_doctor_reads_stored_limits_back_cleanly(cli) -> None:  # type: ignore[no-untyped-def]
    """jobs.json keeps cpu in whole seconds; doctor holds it to the stored form, not the file's."""
    cli("add", "capped", "--every", "1h", "--limit", "cpu=1m", "--limit", "memory=1G", "--", "true")
    out = cli("doctor").out
    assert "[ok] jobs:" in out and "limits" not in out
