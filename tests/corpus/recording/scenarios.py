"""Scripted answers for the recording upstream (stdlib only).

``respond(body, headers)`` decides from the request body alone which agent of which scenario is
calling (every agent's system prompt carries a marker phrase, below) and how far it has got (what its
history already holds), and returns the next scripted answer. It never looks at the identity
headers, so the same answers come back when history-proxy sits in between (the proxy does not
forward those headers). Only the ANSWERS are scripted; the recorded requests are what the frameworks
built and sent.

Tasks (the statement every agent's history should keep) are defined here so the recording scripts
and the end-to-end test share them.
"""

from __future__ import annotations

import json
import re

from recorder import Json, count_tool_results, last_message, mock_text, system_text, text_of, tool_names

# --- task statements -------------------------------------------------------------------------
AUTOGEN_RR_TASK = ("Write a Python function slugify(title) that lowercases the title, replaces runs of "
                   "non-alphanumeric characters with a single hyphen and strips leading/trailing hyphens.")
AUTOGEN_SELECTOR_TASK = "Find the populations of Lyon and Marseille and write one sentence comparing them."
CREWAI_HIER_TASK = ("Write a three-bullet briefing on the city of Lyon for a visiting engineering team: "
                    "population, main industries, and one practical travel tip.")
# what the scripted CrewAI manager delegates (the task statement each coworker is given)
CREWAI_RESEARCH_SUBTASK = "Collect Lyon's population (use your population tool) and its main industries."
CREWAI_WRITE_SUBTASK = "Turn the researcher's findings into a three-bullet briefing with one practical travel tip."
CREWAI_TOOL_TASK = "Look up the populations of Lyon and Marseille with the population tool and report which is larger."
LANGGRAPH_TASK = "What is the population of Lyon, and what is that number divided by 1000?"
AGENTS_SDK_TASK = "I was charged twice for order A-1042. Please check the order and tell me what happened."
PYDANTIC_TASK_1 = "What is the population of Lyon?"
PYDANTIC_TASK_2 = "And how does that compare with Marseille?"

POPULATIONS = {"lyon": 522250, "marseille": 873076, "paris": 2102650}


def population(city: str) -> str:
    """The deterministic result of every framework's population tool."""
    n = POPULATIONS.get(city.strip().lower())
    return f"{city}: {n} inhabitants (INSEE 2021)" if n else f"{city}: unknown city"


# --- helpers ---------------------------------------------------------------------------------

def _own_turns(body: Json) -> int:
    """How many assistant messages the request already holds."""
    return sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")


def _named_user(body: Json, name: str) -> bool:
    return any(m.get("role") == "user" and m.get("name") == name for m in body.get("messages", []))


def _all_text(body: Json) -> str:
    parts = []
    for m in body.get("messages", []):
        parts.append(text_of(m.get("content")))
        for tc in m.get("tool_calls") or []:
            parts.append(tc.get("function", {}).get("arguments", ""))
    return "\n".join(parts)


def _text(content: str) -> Json:
    return {"content": content, "tool_calls": []}


def _call(name: str, arguments: Json | str, content: str | None = None) -> Json:
    return {"content": content, "tool_calls": [{"name": name, "arguments": arguments}]}


def _calls(calls: list[tuple[str, Json]], content: str | None = None) -> Json:
    return {"content": content, "tool_calls": [{"name": n, "arguments": a} for n, a in calls]}


# --- AutoGen round robin: coder and reviewer -------------------------------------------------
CODE_V1 = ("```python\nimport re\n\ndef slugify(title):\n    return re.sub(r'[^a-z0-9]+', '-', title.lower())\n```")
CODE_V2 = ("```python\nimport re\n\ndef slugify(title: str) -> str:\n    \"\"\"Lowercase, hyphenate runs of "
           "non-alphanumerics, strip hyphens.\"\"\"\n    return re.sub(r'[^a-z0-9]+', '-', title.lower()).strip('-')\n```")
CODE_V3 = CODE_V2.replace("title.lower()", "title.strip().lower()")


def autogen_rr(body: Json) -> Json | None:
    sys = system_text(body)
    if "[agent:autogen-rr-coder]" in sys:
        n = _own_turns(body)
        return _text(["Here is a first version:\n" + CODE_V1,
                      "Revised after review (strip leading/trailing hyphens, type hints, docstring):\n" + CODE_V2,
                      "Final version, also trimming whitespace first:\n" + CODE_V3][min(n, 2)])
    if "[agent:autogen-rr-reviewer]" in sys:
        n = _own_turns(body)
        return _text(["Review: the function does not strip leading/trailing hyphens ('  Hello, World! ' gives "
                      "'-hello-world-'), and it has no docstring or type hints. Please fix both.",
                      "Review: correct now. Minor: call .strip() on the title before lowercasing. Otherwise APPROVED.",
                      "APPROVED."][min(n, 2)])
    return None


# --- AutoGen selector: planner, researcher (tool), writer; the selector model ----------------

def autogen_selector(body: Json) -> Json | None:
    sys = system_text(body)
    all_text = _all_text(body)
    if "Select the next role" in all_text or "select the next role" in all_text:
        # the SelectorGroupChat's own model call: choose the next speaker from the transcript
        history = all_text.split("Read the following conversation.")[-1]
        spoke = re.findall(r"^(planner|researcher|writer)\s*:", history, flags=re.MULTILINE)
        last = spoke[-1] if spoke else None
        nxt = {None: "planner", "planner": "researcher", "researcher": "writer", "writer": "planner"}[last]
        return _text(nxt)
    if "[agent:autogen-sel-planner]" in sys:
        if _named_user(body, "writer"):
            return _text("The writer's sentence answers the task. TERMINATE")
        return _text("Plan:\n1. researcher: look up the populations of Lyon and Marseille with the tool.\n"
                     "2. writer: write one sentence comparing them.")
    if "[agent:autogen-sel-researcher]" in sys:
        if last_message(body).get("role") == "tool":
            return _text("Lyon has 522250 inhabitants and Marseille 873076 (INSEE 2021).")
        return _calls([("lookup_population", {"city": "Lyon"}), ("lookup_population", {"city": "Marseille"})])
    if "[agent:autogen-sel-writer]" in sys:
        return _text("With 873,076 inhabitants, Marseille is about 1.7 times as populous as Lyon (522,250).")
    return None


# --- CrewAI: hierarchical crew (manager delegates to researcher and writer), and a tool loop ----

def _tool_named(body: Json, *candidates: str) -> str | None:
    names = tool_names(body)
    for c in candidates:
        for n in names:
            if n.lower().replace(" ", "_") == c:
                return n
    return None


def crewai(body: Json) -> Json | None:
    sys = system_text(body)
    if "You are Crew Manager" in sys:
        delegate = _tool_named(body, "delegate_work_to_coworker")
        done = count_tool_results(body)
        if delegate and done == 0:
            return _call(delegate, {"task": CREWAI_RESEARCH_SUBTASK,
                                    "context": "Briefing for a visiting engineering team; figures must be current.",
                                    "coworker": "City Researcher"})
        if delegate and done == 1:
            return _call(delegate, {"task": CREWAI_WRITE_SUBTASK,
                                    "context": "Lyon: 522,250 inhabitants (INSEE 2021); industries: pharmaceuticals, "
                                               "biotech, software, textiles heritage.",
                                    "coworker": "Briefing Writer"})
        return _text("- Population: 522,250 (INSEE 2021), third-largest city in France.\n"
                     "- Main industries: pharmaceuticals and biotech, software, a textiles heritage.\n"
                     "- Travel tip: buy a TCL day pass; metro and trams cover the whole centre.")
    if "[agent:crewai-researcher]" in sys:
        tool = _tool_named(body, "population")
        if tool and count_tool_results(body) == 0:
            return _call(tool, {"city": "Lyon"})
        return _text("Lyon has 522,250 inhabitants (INSEE 2021). Main industries: pharmaceuticals and biotech, "
                     "software, and a textiles heritage.")
    if "[agent:crewai-writer]" in sys:
        return _text("- Population: 522,250 (INSEE 2021).\n- Industries: pharma/biotech, software, textiles.\n"
                     "- Tip: buy a TCL day pass for metro and trams.")
    if "[agent:crewai-analyst]" in sys and not body.get("tools"):
        # CrewAI's text (ReAct) tool format, used for LLMs without native function calling: each
        # result comes back appended to the assistant's text as "Observation: ...".
        done = sum(text_of(m.get("content")).count("Observation:") for m in body.get("messages", [])
                   if m.get("role") == "assistant")
        if done < 2:
            city = ["Lyon", "Marseille"][done]
            return _text(f"Thought: I need the population of {city}.\nAction: population\n"
                         f"Action Input: {json.dumps({'city': city})}")
        return _text("Thought: I now know the final answer\nFinal Answer: Marseille (873,076 inhabitants) is "
                     "larger than Lyon (522,250), per INSEE 2021.")
    if "[agent:crewai-analyst]" in sys:
        tool = _tool_named(body, "population")
        done = count_tool_results(body)
        if tool and done < 2:
            return _call(tool, {"city": ["Lyon", "Marseille"][done]})
        return _text("Marseille (873,076 inhabitants) is larger than Lyon (522,250), per INSEE 2021.")
    return None


# --- LangGraph supervisor (langgraph-supervisor): supervisor, researcher, calculator -------------

def langgraph(body: Json) -> Json | None:
    sys = system_text(body)
    if "[agent:lg-supervisor]" in sys:
        seen = _all_text(body)
        if "522.25" in seen:
            return _text("Lyon has 522,250 inhabitants; divided by 1000 that is 522.25.")
        target = "transfer_to_calculator" if "522250" in seen or "522,250" in seen else "transfer_to_researcher"
        if target in tool_names(body):
            return _call(target, {})
        return _text(mock_text(body))
    if "[agent:lg-researcher]" in sys:
        if count_tool_results(body, "lookup_population"):
            return _text("Lyon has 522,250 inhabitants (INSEE 2021).")
        return _call("lookup_population", {"city": "Lyon"})
    if "[agent:lg-calculator]" in sys:
        if count_tool_results(body, "divide"):
            return _text("522250 / 1000 = 522.25")
        return _call("divide", {"a": 522250, "b": 1000})
    return None


# --- OpenAI Agents SDK: triage hands off to a billing specialist with a function tool ---------

def agents_sdk(body: Json) -> Json | None:
    sys = system_text(body)
    if "[agent:sdk-triage]" in sys:
        handoff = next((n for n in tool_names(body) if n.startswith("transfer_to_")), None)
        if handoff and count_tool_results(body, handoff) == 0:
            return _call(handoff, {})
        return _text("A billing specialist has looked at your order.")
    if "[agent:sdk-billing]" in sys:
        if "lookup_order" in tool_names(body) and count_tool_results(body, "lookup_order") == 0:
            return _call("lookup_order", {"order_id": "A-1042"})
        return _text("Order A-1042 was charged twice because the first payment timed out and was retried; "
                     "the duplicate charge of 49.90 EUR has been refunded and will show within 5 business days.")
    return None


def lookup_order(order_id: str) -> str:
    return json.dumps({"order_id": order_id, "amount_eur": 49.90, "charges": 2,
                       "note": "payment retried after gateway timeout; duplicate refunded"})


# --- pydantic-ai: one agent with a tool, two runs sharing message_history -----------------------

def pydantic_ai(body: Json) -> Json | None:
    sys = system_text(body)
    if "[agent:pai-assistant]" not in sys:
        return None
    if last_message(body).get("role") == "tool":
        if "Marseille" in text_of(last_message(body).get("content")):
            return _text("Marseille has 873,076 inhabitants, about 1.7 times Lyon's 522,250.")
        return _text("Lyon has 522,250 inhabitants (INSEE 2021).")
    last_user = next((text_of(m.get("content")) for m in reversed(body["messages"]) if m.get("role") == "user"), "")
    return _call("population", {"city": "Marseille" if "Marseille" in last_user else "Lyon"})


# --- dispatch -----------------------------------------------------------------------------------
SCENARIOS = [autogen_rr, autogen_selector, crewai, langgraph, agents_sdk, pydantic_ai]


def respond(body: Json, headers: dict[str, str]) -> Json:
    for scenario in SCENARIOS:
        reply = scenario(body)
        if reply is not None:
            return reply
    return _text(mock_text(body))
