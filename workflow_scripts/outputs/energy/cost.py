"""Dollars per million output tokens from a cell's price (config `cost`, by cell:
config.energy.prices_by_cell) and its measured figures, saying which basis it used. No price, no
dollar figure: none is invented.

- `usd_per_hour` (the machine's price): price per hour ÷ (output tok/s × 3600) × 1e6, the output
  tok/s over the bench window (metrics.json `decode_tok_s`): the machine's hour spread over the
  tokens it made. It needs no energy reading.
- `usd_per_kwh` (energy alone): gross J per output token × price ÷ 3.6e6 J/kWh × 1e6: the
  energy the devices drew over the window, their idle draw included (it is paid for), and only
  that: a GPU's board energy leaves the rest of the machine out. Not measured: no figure.

Stdlib only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...config.energy import PRICES
from ...vocabulary import ENERGY_MEASURED, Status

USD_PER_HOUR, USD_PER_KWH = PRICES
J_PER_KWH = 3.6e6
TOKENS = 1e6  # a million output tokens
COST_COLUMNS = ["usd_per_m_output_tokens", "cost_basis", "cost_price"]


@dataclass(frozen=True)
class Cost:
    """Dollars per million output tokens, the basis (`usd_per_hour` | `usd_per_kwh`) and the
    price it used (in the basis' unit), and why there is no figure where a price was given."""

    usd_per_m_output_tokens: float | None = None
    basis: str | None = None
    price: float | None = None
    note: str = ""

    def columns(self) -> dict[str, Any]:
        return {
            "usd_per_m_output_tokens": self.usd_per_m_output_tokens,
            "cost_basis": self.basis,
            "cost_price": self.price,
        }


def cost_of(
    price: Mapping[str, float] | None,
    output_tok_s: float | None,
    j_per_output_token: float | None,
) -> Cost:
    """One figure's cost: `output_tok_s` over the bench window, `j_per_output_token` gross
    (None: not measured)."""
    if not price:
        return Cost()
    if USD_PER_HOUR in price:
        rate = price[USD_PER_HOUR]
        if not output_tok_s or output_tok_s <= 0:
            return Cost(None, USD_PER_HOUR, rate, "no output tokens per second")
        return Cost(rate / (output_tok_s * 3600.0) * TOKENS, USD_PER_HOUR, rate)
    rate = price[USD_PER_KWH]
    if j_per_output_token is None:
        return Cost(None, USD_PER_KWH, rate, "energy not measured")
    return Cost(j_per_output_token * rate / J_PER_KWH * TOKENS, USD_PER_KWH, rate)


def cell_cost(metrics: Mapping[str, Any], price: Mapping[str, float] | None) -> Cost:
    """A done cell's cost from its metrics.json (`decode_tok_s`, `energy`); nothing for a cell
    that did not finish."""
    if metrics.get("status") != Status.DONE:
        return Cost()
    energy = metrics.get("energy") or {}
    joules = energy.get("j_per_output_token") if energy.get("status") == ENERGY_MEASURED else None
    return cost_of(price, metrics.get("decode_tok_s"), joules)


def basis_text(cost: Cost) -> str:
    """`$3.5/h machine` or `$0.12/kWh energy`: the basis as a table shows it."""
    if cost.basis == USD_PER_HOUR:
        return f"${cost.price:g}/h machine"
    if cost.basis == USD_PER_KWH:
        return f"${cost.price:g}/kWh energy"
    return ""
