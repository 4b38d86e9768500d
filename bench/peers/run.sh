#!/usr/bin/env bash
# Side-by-side benchmarks: Aegis, adk-graph and LangGraph on the five
# workloads of issue 10, one table of median µs per node (or per task) and
# each peer's ratio to Aegis.
#
#   bench/peers/run.sh [ROUNDS] [SAMPLES]
#
# ROUNDS (default 3) rounds, each running every system once, the starting
# system rotating from round to round so that no system always runs first
# (or last) on a machine whose load drifts; each run times SAMPLES (default
# 3) whole runs per workload after one warm-up run. The medians are over
# every sample of every round.
#
# Everything is built and installed under the target folder
# ($PEERS_TARGET, default bench/peers/target): the two Rust projects'
# Cargo targets (override with AEGIS_TARGET / ADK_TARGET to reuse a build)
# and a virtualenv for LangGraph; nothing is installed into the system.
# PEERS_CPU=N pins every run to CPU N (taskset). On a small VM whose
# vCPUs differ in speed from minute to minute, an unpinned process that
# migrates between them runs up to 1.6x slower than a pinned one, which
# swamps the differences measured here; pinned, all systems share the one
# CPU in turn.
# CI does not run this script.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-3}
samples=${2:-3}
target=${PEERS_TARGET:-$here/target}
aegis_target=${AEGIS_TARGET:-$target/aegis}
adk_target=${ADK_TARGET:-$target/adk-graph}
venv=$target/venv
mkdir -p "$target"

echo "== building (release)" >&2
CARGO_TARGET_DIR=$aegis_target cargo build --quiet --release --manifest-path "$here/aegis/Cargo.toml"
CARGO_TARGET_DIR=$adk_target cargo build --quiet --release --manifest-path "$here/adk-graph/Cargo.toml"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet -r "$here/langgraph/requirements.txt"

pin=()
if [ -n "${PEERS_CPU:-}" ]; then
  pin=(taskset -c "$PEERS_CPU")
fi

run_system() {
  case "$1" in
    aegis) "${pin[@]}" "$aegis_target/release/aegis-peer-bench" --samples "$samples" ;;
    adk-graph) "${pin[@]}" "$adk_target/release/adk-graph-peer-bench" --samples "$samples" ;;
    langgraph) "${pin[@]}" "$venv/bin/python" "$here/langgraph/bench.py" --samples "$samples" ;;
  esac
}

results=$target/results.tsv
: > "$results"
systems=(aegis adk-graph langgraph)
for ((round = 0; round < rounds; round++)); do
  for ((k = 0; k < ${#systems[@]}; k++)); do
    system=${systems[$(((round + k) % ${#systems[@]}))]}
    echo "== round $((round + 1))/$rounds: $system ($(cut -d' ' -f1-3 /proc/loadavg) load)" >&2
    run_system "$system" | grep '^RESULT' >> "$results"
  done
done

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "rounds: $rounds, samples per round: $samples${PEERS_CPU:+, pinned to CPU $PEERS_CPU}"
"$venv/bin/python" "$here/table.py" "$results"
