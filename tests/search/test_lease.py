"""One driver per campaign: the lease in the campaign's storage (a real SQLite database)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dse.core.exceptions import DseError
from dse.search.lease import Holder, Lease, LeaseStore, me

CAMPAIGN = "race"


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'study.db'}"


def _planted(tmp_path: Path, **changes: object) -> Holder:
    """A lease row as another driver would have left it."""
    holder = me()
    fields = {**holder.__dict__, "token": "theirs", **changes}
    planted = Holder(**fields)  # type: ignore[arg-type]
    assert LeaseStore(_url(tmp_path)).insert(CAMPAIGN, planted)
    return planted


def test_a_second_driver_is_refused_with_the_holder_named_and_the_lease_goes_on_exit(
        tmp_path: Path) -> None:
    with Lease(_url(tmp_path), CAMPAIGN, where="exp.yaml") as first:
        assert first.took_over == ""
        with pytest.raises(DseError) as refused:
            Lease(_url(tmp_path), CAMPAIGN, where="exp.yaml").__enter__()
        message = str(refused.value)
        assert message.startswith("exp.yaml: campaign 'race' is being run by pid ")
        assert f"pid {os.getpid()} on " in message and "\n" not in message
    assert LeaseStore(_url(tmp_path)).read(CAMPAIGN) is None
    with Lease(_url(tmp_path), CAMPAIGN, where="exp.yaml") as again:
        assert again.took_over == ""


def test_the_lease_of_a_driver_whose_process_is_gone_is_taken_over(tmp_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    _planted(tmp_path, pid=int(gone.stdout), process_start=1.0)
    with Lease(_url(tmp_path), CAMPAIGN, where="exp.yaml") as lease:
        assert f"pid {int(gone.stdout)} on" in lease.took_over
        assert lease.took_over.endswith(f"its process {int(gone.stdout)} is gone")


def test_a_pid_now_used_by_another_process_does_not_hold_the_lease(tmp_path: Path) -> None:
    _planted(tmp_path, process_start=12345.0)  # this process's pid, another start time
    with Lease(_url(tmp_path), CAMPAIGN, where="exp.yaml") as lease:
        assert "now belongs to another process" in lease.took_over


def test_another_hosts_lease_holds_while_it_beats_and_is_taken_once_it_stops(
        tmp_path: Path) -> None:
    now = time.time()
    _planted(tmp_path, host="elsewhere", heartbeat=now - 5)
    with pytest.raises(DseError, match="on elsewhere"):
        Lease(_url(tmp_path), CAMPAIGN, where="exp.yaml").__enter__()
    store = LeaseStore(_url(tmp_path))
    assert store.beat(CAMPAIGN, "theirs", now - 120)
    with Lease(_url(tmp_path), CAMPAIGN, where="exp.yaml") as lease:
        assert "its last heartbeat was 12" in lease.took_over


def test_a_driver_whose_lease_was_taken_over_stops_at_its_next_check(tmp_path: Path) -> None:
    with Lease(_url(tmp_path), CAMPAIGN, where="exp.yaml", beat_s=0.05) as lease:
        lease.check()
        store = LeaseStore(_url(tmp_path))
        assert store.replace(CAMPAIGN, lease.holder.token, _planted_holder())
        deadline = time.monotonic() + 30
        while not lease.lost and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(DseError, match="another driver took over its lease"):
            lease.check()


def _planted_holder() -> Holder:
    holder = me()
    return Holder("usurper", holder.host, holder.pid, holder.process_start, holder.taken_at,
                  holder.heartbeat)
