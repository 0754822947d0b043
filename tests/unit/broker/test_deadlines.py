"""The coordinators' deadline heap and its loop timer (a real event loop, short waits)."""

from __future__ import annotations

import asyncio

from headrace.broker.groups.deadlines import Deadlines


def test_due_pops_every_group_whose_deadline_has_come_once() -> None:
    d = Deadlines(lambda: None)  # no running loop: no timer, due() does the work
    d.add(5.0, "b")
    d.add(3.0, "a")
    d.add(4.0, "a")
    d.add(9.0, "c")
    assert d.next() == 3.0
    assert d.due(2.9) == set()
    assert d.due(5.0) == {"a", "b"}
    assert d.next() == 9.0
    assert len(d) == 1


def test_the_timer_fires_at_the_earliest_deadline_and_rearms() -> None:
    async def scenario() -> list[str]:
        loop = asyncio.get_running_loop()
        fired: list[str] = []
        done = loop.create_future()

        def on_due() -> None:
            got = d.due(loop.time())
            fired.extend(sorted(got))
            if "late" in got:
                done.set_result(None)

        d = Deadlines(on_due)
        start = loop.time()
        d.add(start + 0.2, "late")
        d.add(start + 0.02, "early")  # earlier: the timer is re-armed for it
        await asyncio.wait_for(done, 5)
        assert loop.time() >= start + 0.2
        return fired

    assert asyncio.run(scenario()) == ["early", "late"]
