#!/usr/bin/env python3
"""Churn and cost of a simulated run: reads `simulate -o json` over simulated time on standard input and prints the
disruption commands, the pods they moved (their displaced pods) and the time-weighted average $/h from the first
event to the end of the run (`--for`, seconds, the second argument's default 24h).

  karpenter-controller simulate examples/fluctuating/cluster.yaml --timeline examples/fluctuating/timeline.yaml \
      --for 24h -o json | python3 examples/fluctuating/churn.py
"""
import json
import sys

end = int(sys.argv[1]) if len(sys.argv) > 1 else 24 * 3600
doc = json.load(sys.stdin)
events = doc.get("events") or doc.get("timeline", {}).get("events") or []
commands = [e for e in events if e.get("type") == "Disruption"]
moved = sum(len((e.get("command") or {}).get("displacedPods") or []) for e in commands)
weighted, last_t, last_price = 0.0, 0, None
for e in events:
    t = min(e["offsetSeconds"], end)
    if last_price is not None:
        weighted += last_price * (t - last_t)
    last_t, last_price = t, e["pricePerHourAfter"]
if last_price is not None:
    weighted += last_price * (end - last_t)
print(f"commands {len(commands)}, pods moved {moved}, average ${weighted / end:.4f}/h over {end / 3600:g} h")
