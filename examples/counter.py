"""The smallest example: a durable account whose balance survives restarts.

Run: python examples/counter.py   (run it twice: the balance keeps growing)
"""

from __future__ import annotations

import warnings

import anyio
import msgspec

import tether

# The example is one file, so its actors and tools live in __main__, which no other process
# can import: tether warns of that at spawn. An application keeps them in a module.
warnings.filterwarnings("ignore", category=tether.MainModuleWarning)


class Deposit(tether.Message):
    amount: int


class GetBalance(tether.Message):
    pass


class Deposited(tether.Event):
    amount: int


class AccountState(msgspec.Struct):
    balance: int = 0


class Account(tether.Actor[AccountState]):
    initial_state = AccountState()

    def apply(self, state: AccountState, event: Deposited) -> AccountState:
        return AccountState(balance=state.balance + event.amount)

    async def handle(self, msg: Deposit | GetBalance) -> int | None:
        match msg:
            case Deposit(amount=a):
                self.persist(Deposited(amount=a))
            case GetBalance():
                return self.state.balance
        return None


async def main() -> None:
    # A file of its own: examples/first_agent.py uses agents.db, and each example's classes
    # live in __main__, so one example's actors cannot be resumed by the other.
    async with tether.Runtime("counter.db") as rt:
        acct = await rt.spawn(Account, "acct-1")
        await acct.tell(Deposit(amount=5))
        print("balance:", await acct.ask(GetBalance(), timeout=5))


if __name__ == "__main__":
    anyio.run(main)
