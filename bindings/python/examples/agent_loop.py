"""One turn of an agent loop: the model answered with a `<tool-calls>`
block; the harness runs it with Python tools and hands back the items to
append to the conversation, here in the OpenAI Responses format.

    python bindings/python/examples/agent_loop.py

A real loop sends `harness.typescript()` in the system prompt, calls the
model, passes its text to `respond`, appends the items to the input and
calls the model again until it answers without a block.
"""

from __future__ import annotations

import asyncio
import json
from typing import Dict, List

import script_harness as sh

ORDERS: Dict[str, List[Dict[str, object]]] = {
    "ada": [{"id": "o-1", "total": 42.5}, {"id": "o-2", "total": 17.0}],
    "alan": [{"id": "o-3", "total": 99.9}],
}


@sh.tool
def list_orders(customer: str) -> List[Dict[str, object]]:
    """The customer's orders.

    Args:
        customer: The customer's login name.
    """
    return ORDERS.get(customer, [])


@sh.tool
async def exchange_rate(currency: str) -> float:
    """How many units of `currency` one euro buys."""
    await asyncio.sleep(0.01)  # a real tool would call an API here
    return {"USD": 1.08, "GBP": 0.85}.get(currency, 1.0)


# What a model answered (fixed here, so the example runs offline).
MODEL_RESPONSE = """I'll total the orders for both customers in dollars.

<tool-calls lang="ts">
const [rate, ...orders] = await Promise.all([
  tools.exchange_rate({ currency: "USD" }),
  tools.list_orders({ customer: "ada" }),
  tools.list_orders({ customer: "alan" }),
]);
const total = orders.flat().reduce((sum, o) => sum + o.total, 0);
console.log(`${orders.flat().length} orders`);
return { totalUsd: Math.round(total * rate * 100) / 100 };
</tool-calls>
"""


def main() -> None:
    with sh.Harness(tools=[list_orders, exchange_rate]) as harness:
        print("// what the model is told it can call:")
        print(harness.typescript())
        items = harness.respond(MODEL_RESPONSE, format="openai-responses")
        print("// items to append to the conversation:")
        print(json.dumps(items, indent=2))


if __name__ == "__main__":
    main()
