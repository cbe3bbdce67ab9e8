"""An elliptical follow-up keeps the conversation's fund and asks its question again for the period it names,
and the strategy event says so (`carried`), on the real stack with the offline answerer: "How about July
2024?" after Northwind's August loss is searched within Northwind as "How much did Northwind lose in July
2024?", never across every fund (the labelled set checks the answer's 1.9%)."""
from __future__ import annotations

import httpx

from tests.stack import Stack

NORTHWIND = "Northwind Global Macro Fund"


def test_how_about_july_keeps_northwind_and_says_what_it_carried(stack: Stack) -> None:
    gateway = stack.start_variant("gateway", retrieval_timeout_s=30.0)  # a search given up for time proves nothing
    try:
        reply = _ask_july(f"http://{stack.settings.host}:{gateway.app.http_port}", stack.headers)
    finally:
        stack.extra.remove(gateway)
        stack.call(gateway.stop())
    strategy = reply["meta"]["strategy"]
    assert strategy["filter"]["in"] == {"fund_name": [NORTHWIND]}, strategy["reason"]
    assert strategy["carried"] == {
        "funds": [NORTHWIND], "period": "", "start_date": "", "end_date": "", "people": [],
        "question": "How much did Northwind lose in August 2024?", "replaced": ["period: August 2024 -> July 2024"]}
    assert "carried from the conversation: funds Northwind Global Macro Fund" in strategy["reason"]
    assert "Northwind" in reply["answer"] and "Meridian" not in reply["answer"]


def _ask_july(url: str, headers: dict[str, str]) -> dict:
    with httpx.Client(base_url=url, headers=headers, timeout=120) as client:
        first = client.post("/api/chat/ask", json={"question": "How much did Northwind lose in August 2024?"}).json()
        assert "4.1%" in first["answer"]
        return client.post("/api/chat/ask", json={"question": "How about July 2024?",
                                                  "conversation_id": first["conversation_id"]}).json()
