"""Actors the tests share. Module level, so the runtime can import them on recovery."""

from __future__ import annotations

import anyio
import msgspec

import tether


class Deposit(tether.Message):
    amount: int


class Fail(tether.Message):
    """Persists an event, then raises ``times`` times (counted in the actor's ``failures``)."""

    key: str
    times: int = 1_000_000


class GetBalance(tether.Message):
    pass


class GetLog(tether.Message):
    pass


class Forward(tether.Message):
    to: str
    amount: int


class Sleep(tether.Message):
    seconds: float


class StopMe(tether.Message):
    reason: str


class Deposited(tether.Event):
    amount: int


class AccountState(msgspec.Struct):
    balance: int = 0
    log: list[int] = msgspec.field(default_factory=list)


# failures per key, per process: lets a test make a handler fail a set number of times
failures: dict[str, int] = {}


class Account(tether.Actor[AccountState]):
    initial_state = AccountState()

    def apply(self, state: AccountState, event: Deposited) -> AccountState:
        return AccountState(balance=state.balance + event.amount, log=[*state.log, event.amount])

    async def handle(
        self, msg: Deposit | Fail | GetBalance | GetLog | Forward | StopMe | Sleep
    ) -> int | list[int] | None:
        match msg:
            case Deposit(amount=a):
                self.persist(Deposited(amount=a))
            case Fail(key=k, times=n):
                self.persist(Deposited(amount=1000))
                if failures.get(k, 0) < n:
                    failures[k] = failures.get(k, 0) + 1
                    raise RuntimeError(f"boom {k}")
            case GetBalance():
                return self.state.balance
            case GetLog():
                return self.state.log
            case Forward(to=target, amount=a):
                self.persist(Deposited(amount=-a))
                await self.ref(target).tell(Deposit(amount=a))
            case Sleep(seconds=t):
                await anyio.sleep(t)
            case StopMe(reason=r):
                self.stop(r)
        return None


class Greeter(tether.Actor[int]):
    """Takes constructor arguments; counts greetings."""

    initial_state = 0

    def __init__(self, greeting: str, punctuation: str = "!") -> None:
        self.greeting = greeting
        self.punctuation = punctuation

    def apply(self, state: int, event: Deposited) -> int:
        return state + 1

    async def handle(self, msg: GetBalance) -> str:
        return f"{self.greeting}{self.punctuation}"


class Lifecycle(tether.Actor[int]):
    """Records on_start/on_stop calls in a module-level list."""

    initial_state = 0
    calls: list[str] = []

    async def on_start(self) -> None:
        Lifecycle.calls.append(f"start:{self.id}")

    async def on_stop(self) -> None:
        Lifecycle.calls.append(f"stop:{self.id}")

    async def handle(self, msg: GetBalance) -> int:
        return self.state
