"""The order state: ``{"seed", "epoch", "consumed"}``, global, tiny, JSON-serialisable.

``consumed`` counts the samples of epoch ``epoch``'s global order that the training
loop has actually taken (padding included), i.e. a prefix ``[0, consumed)`` of it.
It is identical on every rank and independent of world size, batch size and workers.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

__all__ = ["OrderState"]


@dataclass(frozen=True)
class OrderState:
    seed: int = 0
    epoch: int = 0
    consumed: int = 0

    def __post_init__(self):
        for name in ("seed", "epoch", "consumed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"order state {name!r} must be an int, got {value!r}")
        if self.epoch < 0 or self.consumed < 0:
            raise ValueError(f"order state epoch and consumed must be >= 0, got {self}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, state: dict) -> OrderState:
        missing = {"seed", "epoch", "consumed"} - set(state)
        if missing:
            raise KeyError(f"order state lacks {sorted(missing)}: {state!r}")
        return cls(int(state["seed"]), int(state["epoch"]), int(state["consumed"]))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> OrderState:
        return cls.from_dict(json.loads(text))
