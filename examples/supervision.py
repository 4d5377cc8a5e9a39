"""Supervision: a payments tree with one_for_one, a crash, a restart that keeps the state.

Run: python examples/supervision.py
"""

from __future__ import annotations

import warnings

import anyio

import tether

# The example is one file, so its actors and tools live in __main__, which no other process
# can import: tether warns of that at spawn. An application keeps them in a module.
warnings.filterwarnings("ignore", category=tether.MainModuleWarning)


class Charge(tether.Message):
    cents: int


class Flaky(tether.Message):
    """Fails on its first delivery (a transient fault), succeeds when redelivered."""


class Total(tether.Message):
    pass


class Charged(tether.Event):
    cents: int


failed_once: set[str] = set()


class Ledger(tether.Actor[int]):
    initial_state = 0

    def apply(self, state: int, event: Charged) -> int:
        return state + event.cents

    async def handle(self, msg: Charge | Flaky | Total) -> int | None:
        match msg:
            case Charge(cents=c):
                self.persist(Charged(cents=c))
            case Flaky():
                if self.id not in failed_once:
                    failed_once.add(self.id)
                    raise ConnectionError("payment gateway reset the connection")
            case Total():
                return self.state
        return None


class Payments(tether.Supervisor):
    strategy = tether.OneForOne(
        max_restarts=3, within=10.0, backoff=tether.Backoff(initial_delay=0.05, max_delay=1.0)
    )
    children = (tether.ChildSpec(Ledger, "ledger-eu"), tether.ChildSpec(Ledger, "ledger-us"))


async def main() -> None:
    async with tether.Runtime("supervision-example.db") as rt:
        await rt.spawn(Payments, "payments")
        eu = rt.ref("ledger-eu")
        await eu.tell(Charge(cents=500))
        await eu.tell(Flaky())  # crashes the ledger once: its supervisor restarts it
        await eu.tell(Charge(cents=250))
        print("ledger-eu total after a crash and a restart:", await eu.ask(Total(), timeout=10))
        for root in await rt.tree():
            print(root.render())


if __name__ == "__main__":
    anyio.run(main)
