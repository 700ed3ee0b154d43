"""A drain's share-managers on the event loop, one admission at a time, in slices, after VM starts.

A drain's share-manager finds its VM, renders the VM's migration target pod and judges nodes for
both pods (milliseconds on hundreds of nodes), and a drain re-creates tens of them at once. Run
side by side, each gets a turn in every round of the loop, so anything else waiting for the loop
(a VM start's TLS handshake, its headers, its answer) waits behind a stretch of each of them at
every step. In one lane, a single stretch of one of them, at most a slice long, stands between
two steps of everything else, whatever the storm: VM starts keep their pace, and the
share-managers are answered one after another, the first ones sooner than side by side.

VM reviews go first: while one is being read and answered (`vm`: a review on the VM webhook's own
path, known from its request line), a share-manager does not start its turn nor its next slice.
"""
from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from ..deadline import Deadline
from ..process.pace import SLICE, Pacer


class Lane:
    """Where long rule work waits its turn: one admission's work at a time (`turn`), its long
    loops in slices (`slices`), both after the VM reviews in flight (`vm`). One per server (its
    event loop); a tool answering one pod needs none."""

    def __init__(self, slice_seconds: float = SLICE) -> None:
        self.slice = slice_seconds
        self._turn = asyncio.Lock()
        self.waiting = 0  # admissions waiting for their turn (the log's and tests' view of the queue)
        self.vms = 0  # VM reviews being answered
        self._no_vm = asyncio.Event()
        self._no_vm.set()

    @contextlib.contextmanager
    def vm(self) -> Iterator[None]:
        """A VM review being answered, from its handler's start to its answer: share-managers wait."""
        self.vms += 1
        self._no_vm.clear()
        try:
            yield
        finally:
            self.vms -= 1
            if self.vms == 0:
                self._no_vm.set()

    async def after_vms(self) -> None:
        """Once no VM review is being answered (at once when none is)."""
        if self.vms:
            await self._no_vm.wait()

    @contextlib.asynccontextmanager
    async def turn(self, deadline: Deadline) -> AsyncIterator[bool]:
        """This admission's turn, held until the block ends: True once it has it (and no VM
        review is being answered), False when the deadline came first (the block then runs
        without it, and should answer at once)."""
        self.waiting += 1
        held = False
        try:
            async with deadline.timeout():
                await self._turn.acquire()
                held = True
                await self.after_vms()
        except TimeoutError:
            self.waiting -= 1
            if held:
                self._turn.release()
            yield False
            return
        self.waiting -= 1
        try:
            yield True
        finally:
            self._turn.release()

    async def slices(self, steps: Iterable[Any], deadline: Deadline) -> bool:
        """Take `steps` one by one by an admission that has its turn, giving the loop back every
        slice, and waiting there while VM reviews are answered; False when the deadline came first."""
        pacer = Pacer(self.slice)
        for _ in steps:
            if time.monotonic() >= pacer.until:
                if deadline.remaining() <= 0:
                    return False
                await pacer.give_back()
                if self.vms:  # one came, or was being answered: its turn first
                    try:
                        async with deadline.timeout():
                            await self.after_vms()
                    except TimeoutError:
                        return False
                    pacer.until = time.monotonic() + self.slice
        return True
