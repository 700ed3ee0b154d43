"""When virt-handler resumes a VM that QEMU paused on a disk I/O error: its `io-error-retry`
backoff, as a pure model a test scripts a failing mount with (kubefake.virt_handler plays each
pause and resume on the apiserver).

KubeVirt v1.9.0 (the same in 1.8): `pkg/virt-handler/vm.go` makes `ioErrorRetryManager =
NewFailRetryManager("io-error-retry", 10*time.Second, 3*time.Minute, 30*time.Second)` (initial
wait, max wait, max fail response time). Each sync of a VMI whose domain is paused with reason
IOError asks it `ShouldDelay` (`pkg/virt-handler/retry_manager.go`); when the answer is no delay,
the sync goes on to `processVmUpdate`, whose `SyncVMI` (`pkg/virt-launcher/virtwrap/manager.go`)
resumes a paused domain that is not in its paused set (paused by a user, or kept paused by a
migration target: `live-migration-target.go`). So:

- the first I/O error pause is resumed at once (no state: a new one, no delay), and so is any pause
  more than 30 s after the last resume (a "new failure": the state starts again, the wait back at
  10 s). `Run` also forgets such a state every 3 min, which changes nothing here;
- a pause within 30 s of the last resume is that resume failing: the sync is put off until
  `nextRun`, the last resume plus the wait (10 s after the first); then the wait doubles (20, 40,
  80, 160 s, then 180 s: the 3 min cap) and the VM is resumed at once; the next resume is due
  `wait` after this one. A pause within 30 s but after `nextRun` is resumed at once, the wait kept.

A mount that fails at once keeps the VM paused but for instants: resumed at 0, 10, 30, 70, 150,
310 s, then every 180 s. One that fails minutes after each resume sees each pause resumed at
once. Each pause virt-handler sees after seeing the VM running is a new Paused condition (it
adds one when there is none: `calculatePausedCondition`), with a new lastTransitionTime. But a
domain event carries the state libvirt reports when virt-launcher handles it
(`pkg/virt-launcher/notify-client/client.go`, `eventCallback`: `GetState`), and the sync that
resumes the domain writes the status it read before (`updateVMIStatus` with the cached domain):
a VM that pauses again before virt-handler notices it running keeps its condition and its first
lastTransitionTime while the backoff goes on. Which one a fast-failing mount shows is a race;
`kubefake.virt_handler.play_io_errors` plays either.
"""
from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence

INITIAL_WAIT = datetime.timedelta(seconds=10)
MAX_WAIT = datetime.timedelta(minutes=3)
MAX_FAIL_RESPONSE = datetime.timedelta(seconds=30)


@dataclasses.dataclass(frozen=True)
class Backoff:
    """`retryState` for one VMI: the last resume, when the next is due, the wait, and whether a
    pause after the last resume was taken for its failure."""
    last_run: datetime.datetime
    next_run: datetime.datetime
    wait: datetime.timedelta
    last_run_failed: bool = False


@dataclasses.dataclass(frozen=True)
class IoErrorRetry:
    """virt-handler's `io-error-retry` (the module's docstring says how it goes)."""
    initial_wait: datetime.timedelta = INITIAL_WAIT
    max_wait: datetime.timedelta = MAX_WAIT
    max_fail_response: datetime.timedelta = MAX_FAIL_RESPONSE

    def fresh(self, now: datetime.datetime) -> Backoff:
        return Backoff(last_run=now, next_run=now + self.initial_wait, wait=self.initial_wait)

    def should_delay(self, state: Backoff | None,
                     now: datetime.datetime) -> tuple[Backoff, datetime.datetime | None]:
        """`ShouldDelay` for a sync at `now` of a VM paused on an I/O error: the new state, and
        until when the resume is put off (None: resumed at `now`)."""
        if state is None:
            return self.fresh(now), None
        if not state.last_run_failed:
            if state.last_run + self.max_fail_response > now:  # this resume failed
                failed = dataclasses.replace(state, last_run_failed=True)
                return failed, (state.next_run if state.next_run > now else None)
            return self.fresh(now), None  # a new failure
        if now < state.next_run:
            return state, state.next_run
        wait = min(state.wait * 2, self.max_wait)
        return Backoff(last_run=now, next_run=now + wait, wait=wait), None

    def resumes(self, pauses: Sequence[datetime.datetime]) -> list[datetime.datetime]:
        """When virt-handler resumes the VM after each of `pauses` (oldest first, each at or after
        the resume before it). ValueError for a pause before the VM was resumed."""
        state: Backoff | None = None
        found: list[datetime.datetime] = []
        for pause in pauses:
            if found and pause < found[-1]:
                raise ValueError(f"paused at {pause:%H:%M:%S}, before virt-handler resumed it at {found[-1]:%H:%M:%S}")
            state, until = self.should_delay(state, pause)
            if until is not None:  # the sync put off runs again then
                state, until = self.should_delay(state, until)
                found.append(state.last_run)
            else:
                found.append(pause)
        return found

    def next_resume(self, pauses: Sequence[datetime.datetime]) -> datetime.datetime:
        """When virt-handler resumes the VM after the last of `pauses`."""
        if not pauses:
            raise ValueError("no pause to resume")
        return self.resumes(pauses)[-1]

    def fast_failing(self, start: datetime.datetime, count: int) -> list[tuple[datetime.datetime, datetime.datetime]]:
        """A mount that fails at once: paused at `start`, and again the moment each retry resumes
        it; the first `count` (pause, resume) pairs."""
        pauses = [start]
        while len(pauses) < count:
            pauses.append(self.next_resume(pauses))
        return list(zip(pauses, self.resumes(pauses), strict=True))

    def slowly_failing(self, start: datetime.datetime,
                       running: Sequence[datetime.timedelta]) -> list[tuple[datetime.datetime, datetime.datetime]]:
        """A mount that fails a while after each resume: paused at `start`, then again after
        running each of `running` from the resume before; the (pause, resume) pairs."""
        pauses = [start]
        for span in running:
            pauses.append(self.next_resume(pauses) + span)
        return list(zip(pauses, self.resumes(pauses), strict=True))
