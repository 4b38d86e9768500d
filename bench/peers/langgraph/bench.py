"""The LangGraph side of the peer benchmarks (bench/peers/run.sh).

The five workloads of issue 10, timed one whole run at a time, printed as
``RESULT <workload> langgraph <none|memory> <us per node or task>``.
Graphs are compiled once per workload; only ``invoke`` is timed.

Usage: ``python bench.py [--samples N]`` (default 5 timed runs per workload
and checkpointer, after one warm-up run).
"""

import argparse
import asyncio
import operator
import sys
import time
from typing import Annotated, TypedDict

from langgraph.cache.memory import InMemoryCache
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import CachePolicy, RetryPolicy, Send, TimeoutPolicy


class State(TypedDict, total=False):
    n: Annotated[int, operator.add]
    items: Annotated[list, operator.add]
    i: int


def add_one(state: State) -> dict:
    return {"n": 1}


async def add_one_async(state: State) -> dict:
    return {"n": 1}


def flaky(seen: set, name: str):
    """A node failing its first attempt of each run with a transient error."""

    def node(state: State) -> dict:
        key = (id(seen_run[0]), name)
        if key not in seen:
            seen.add(key)
            raise ConnectionError("transient failure")
        return {"n": 1}

    return node


seen_run = [object()]


def chain(n: int, node_for=None, **node_kwargs) -> StateGraph:
    g = StateGraph(State)
    prev = START
    for i in range(n):
        name = f"n{i:05}"
        g.add_node(name, node_for(name) if node_for else add_one, **node_kwargs)
        g.add_edge(prev, name)
        prev = name
    g.add_edge(prev, END)
    return g


def fan_out(n: int) -> StateGraph:
    g = StateGraph(State)

    def split(state: State) -> dict:
        return {}

    def route(state: State):
        return [Send("worker", {"i": i}) for i in range(n)]

    def worker(state: State) -> dict:
        return {"items": [state["i"]]}

    g.add_node("split", split)
    g.add_node("worker", worker)
    g.add_edge(START, "split")
    g.add_conditional_edges("split", route, ["worker"])
    g.add_edge("worker", END)
    return g


class Runner:
    def __init__(self, samples: int):
        self.samples = samples
        self.thread = 0

    def measure(self, workload, builder, units, mode, input_for=None, is_async=False, compile_kwargs=None, samples=None, warm_up=True):
        kwargs = dict(compile_kwargs or {})
        if mode == "memory":
            kwargs["checkpointer"] = InMemorySaver()
        graph = builder.compile(**kwargs)
        samples = self.samples if samples is None else samples
        for sample in range(0 if warm_up else 1, samples + 1):
            self.thread += 1
            seen_run[0] = object()
            config = {
                "recursion_limit": units + 100,
                "configurable": {"thread_id": f"t{self.thread}"},
            }
            inp = input_for(sample) if input_for else {"n": 0}
            t0 = time.perf_counter()
            if is_async:
                out = asyncio.run(graph.ainvoke(inp, config))
            else:
                out = graph.invoke(inp, config)
            elapsed = time.perf_counter() - t0
            if out is None:
                raise SystemExit(f"{workload}: no output")
            if sample > 0:
                print(f"RESULT\t{workload}\tlanggraph\t{mode}\t{elapsed * 1e6 / units:.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=5)
    args = parser.parse_args()
    r = Runner(args.samples)
    sys.setrecursionlimit(100_000)

    for mode in ("none", "memory"):
        for n in (100, 1_000):
            r.measure(f"a_chain_{n}", chain(n), n, mode)
        # LangGraph's per-node cost grows with the graph: one cold run of the
        # 10,000-node chain takes tens of seconds without a checkpointer and
        # minutes with one, so it is run once, without.
        if mode == "none":
            r.measure("a_chain_10000", chain(10_000), 10_000, mode, samples=1, warm_up=False)

        r.measure("b_fanout_1000", fan_out(1_000), 1_000, mode)

        # LangGraph's per-attempt timeouts need async nodes (and ainvoke).
        policies = chain(
            1_000,
            node_for=lambda _name: add_one_async,
            retry_policy=RetryPolicy(),
            timeout=TimeoutPolicy(run_timeout=30.0),
        )
        r.measure("c_policies_1000", policies, 1_000, mode, is_async=True)

        seen: set = set()
        flaky_chain = chain(
            1_000,
            node_for=lambda name: flaky(seen, name),
            retry_policy=RetryPolicy(initial_interval=0.0, jitter=False, max_attempts=3),
        )
        r.measure("d_retry_once_1000", flaky_chain, 1_000, mode)

        cached = chain(100, cache_policy=CachePolicy(ttl=3600))
        cache = {"cache": InMemoryCache()}
        base = time.time_ns()
        r.measure("e_cache_miss_100", cached, 100, mode, input_for=lambda s: {"n": base + s}, compile_kwargs=cache)
        r.measure("e_cache_hit_100", cached, 100, mode, input_for=lambda s: {"n": -1}, compile_kwargs=cache)


if __name__ == "__main__":
    main()
