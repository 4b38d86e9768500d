"""Aggregates the RESULT lines of bench/peers/run.sh into one Markdown table:
workload, system (with its checkpointing mode), median µs per node or task,
and the ratio of the system's median to Aegis's (how many times slower
than Aegis; Aegis always writes a waypoint per superstep to its in-memory
store, so both peer modes are compared against that one Aegis figure).

Usage: python table.py results.tsv
"""

import statistics
import sys
from collections import defaultdict

WORKLOADS = [
    ("a_chain_100", "(a) chain, 100 nodes", "node"),
    ("a_chain_1000", "(a) chain, 1,000 nodes", "node"),
    ("a_chain_10000", "(a) chain, 10,000 nodes", "node"),
    ("b_fanout_1000", "(b) fan-out, 1,000 tasks", "task"),
    ("b_muster_100000", "(b) fan-out, 100,000 tasks", "task"),
    ("c_policies_1000", "(c) chain + retry & timeout policies", "node"),
    ("d_retry_once_1000", "(d) chain, every node fails once", "node"),
    ("e_cache_miss_100", "(e) cached chain, miss (100 nodes)", "node"),
    ("e_cache_hit_100", "(e) cached chain, hit (100 nodes)", "node"),
    ("e_no_cache_100", "(e) the same chain, no cache", "node"),
    ("f_cache_hit_100_entries", "(f) hit, 100 entries held", "node"),
    ("f_cache_hit_10000_entries", "(f) hit, 10,000 entries held", "node"),
]
SYSTEMS = [
    ("aegis", "waypoints", "Aegis (in-memory waypoints; always on)"),
    ("adk-graph", "none", "adk-graph, no checkpointer"),
    ("adk-graph", "memory", "adk-graph, MemoryCheckpointer"),
    ("langgraph", "none", "LangGraph, no checkpointer"),
    ("langgraph", "memory", "LangGraph, InMemorySaver"),
]
# How many times slower than Aegis a peer should be (issue 20: 5x adk-graph
# on chains of 100 and 1,000; a cache hit no slower than adk-graph's).
TARGET = {
    ("a_chain_100", "adk-graph"): 5.0,
    ("a_chain_1000", "adk-graph"): 5.0,
    ("e_cache_hit_100", "adk-graph"): 1.0,
}
NOTES = {
    ("b_fanout_1000", "adk-graph"): "no Send: 1,000 static branches",
    ("c_policies_1000", "langgraph"): "async nodes (its timeouts need them)",
    ("a_chain_10000", "langgraph", "memory"): "n/a: not run (minutes per run)",
}


def main() -> None:
    samples = defaultdict(list)
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 5 or parts[0] != "RESULT":
                continue
            _, workload, system, mode, value = parts
            samples[(workload, system, mode)].append(float(value))

    print("| workload | system | median µs per node/task | × Aegis (target) | runs | note |")
    print("|---|---|---:|---:|---:|---|")
    for workload, label, unit in WORKLOADS:
        aegis = samples.get((workload, "aegis", "waypoints"))
        base = statistics.median(aegis) if aegis else None
        for system, mode, system_label in SYSTEMS:
            values = samples.get((workload, system, mode))
            note = NOTES.get((workload, system, mode)) or NOTES.get((workload, system), "")
            if not values:
                print(f"| {label} | {system_label} | n/a | n/a | 0 | {note} |")
                continue
            median = statistics.median(values)
            if system == "aegis" or base is None:
                ratio = "1.0" if system == "aegis" else "n/a"
            else:
                r = median / base
                target = TARGET.get((workload, system))
                if target is None:
                    ratio = f"{r:.1f}×"
                else:
                    verdict = "met" if r >= target else "missed"
                    ratio = f"{r:.1f}× (≥{target:g}× {verdict})"
            print(f"| {label} | {system_label} | {median:.2f} per {unit} | {ratio} | {len(values)} | {note} |")


if __name__ == "__main__":
    main()
