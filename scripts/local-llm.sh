#!/usr/bin/env bash
# A real OpenAI-compatible model server on 127.0.0.1, for tests and examples.
#
#   scripts/local-llm.sh [start] [NAME]   install once, start, print the base URL last
#   scripts/local-llm.sh stop [NAME]      end the instance started as NAME
#   scripts/local-llm.sh install          install only (what CI does up front)
#   scripts/local-llm.sh installed        exit 0 when installed, 1 when not
#
# `start` prints `pid=PID` and `log=FILE` lines, then the base URL (API root,
# version segment included) as its last line.
#
# The server is llama.cpp, through `llama-cpp-python[server]` built from its
# source distribution on PyPI (CPU only). The model is generated here: a tiny
# Llama-architecture GGUF with random weights and a small SentencePiece-style
# vocabulary, written by the `gguf` package. Nothing is downloaded except
# packages from PyPI, and the build is cached outside the clone, in
# $AEGIS_LOCAL_LLM_HOME (default /var/tmp/aegis-local-llm).
#
# NAME (default "default") lets several instances run at once; each has
# $AEGIS_LOCAL_LLM_HOME/run/NAME.{pid,port,log}. Server knobs:
# AEGIS_LOCAL_LLM_N_CTX (default 2048), AEGIS_LOCAL_LLM_READY_SECS (default 60),
# AEGIS_LOCAL_LLM_PARENT_PID (the server is ended when that process exits:
# tests pass their own pid, so a crashed test leaves no server behind).
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
GGUF_VERSION=0.19.0
# Bump when the generated model changes, so caches regenerate it.
MODEL_REVISION=2

home="${AEGIS_LOCAL_LLM_HOME:-/var/tmp/aegis-local-llm}"
venv="$home/venv-$LLAMA_CPP_PYTHON_VERSION"
model="$home/models/aegis-tiny-r$MODEL_REVISION.gguf"
run="$home/run"
python="${AEGIS_LOCAL_LLM_PYTHON:-python3}"

log() { echo "local-llm: $*" >&2; }

install() {
  mkdir -p "$home" "$run" "$home/models"
  # Tests start several instances at once: one installer at a time.
  exec 9>"$home/install.lock"
  flock 9
  if [ ! -f "$venv/.installed" ]; then
    local started=$SECONDS
    log "installing llama-cpp-python $LLAMA_CPP_PYTHON_VERSION from source into $venv (once; several minutes)"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --upgrade pip >&2
    # Only the library the Python server loads: no llava/mtmd, tools,
    # examples or tests. Native CPU flags: the build stays on this machine.
    CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DGGML_BLAS=OFF" \
      CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
      "$venv/bin/pip" install --no-binary llama-cpp-python \
      "llama-cpp-python[server]==$LLAMA_CPP_PYTHON_VERSION" "gguf==$GGUF_VERSION" "numpy<3" >&2
    touch "$venv/.installed"
    log "installed in $((SECONDS - started))s"
  fi
  if [ ! -f "$model" ]; then
    log "generating the tiny model $model"
    "$venv/bin/python" - "$model.tmp" <<'PY'
import sys
import numpy as np
import gguf

path = sys.argv[1]
rng = np.random.default_rng(41)

# Vocabulary: SentencePiece ("llama") with byte fallback, so any text
# tokenizes; a few hundred word pieces so generated text reads as words.
tokens, scores, types = [], [], []
def add(text, score, kind):
    tokens.append(text.encode("utf-8"))
    scores.append(float(score))
    types.append(int(kind))
T = gguf.TokenType
add("<unk>", 0.0, T.UNKNOWN)
add("<s>", 0.0, T.CONTROL)
add("</s>", 0.0, T.CONTROL)
for b in range(256):
    add(f"<0x{b:02X}>", 0.0, T.BYTE)
words = """the a an of to and in is it that for on with as was at by be this
from or are not have but they you he she we his her all one can there
which when will would what up out if about so them some time into only
two more new other then our first any these see way could like been
than its over very also after use most made make know many such see
aegis node graph retry fallback stream token model server llama test
battle field waypoint paladin muster parley gate run step edge cache""".split()
seen = set()
pieces = []
for w in words:
    for p in ("\u2581" + w, w):
        if p not in seen:
            seen.add(p)
            pieces.append(p)
for c in "abcdefghijklmnopqrstuvwxyz0123456789.,!?:;'\"-()[]{}/_=+*#@":
    for p in (c, "\u2581" + c):
        if p not in seen:
            seen.add(p)
            pieces.append(p)
pieces.append("\u2581")
for i, p in enumerate(pieces):
    add(p, -float(i), T.NORMAL)
n_vocab = len(tokens)
eos = 2

# Small enough to load in a blink and write a token in about a millisecond;
# big enough that reading a 1,500-token prompt on one thread takes a good
# fraction of a second (the first-chunk deadline test needs a slow prompt).
n_embd, n_head, n_layer, n_ff = 256, 4, 4, 768
n_ctx_train = 4096

w = gguf.GGUFWriter(path, "llama")
w.add_name("aegis-tiny")
w.add_context_length(n_ctx_train)
w.add_embedding_length(n_embd)
w.add_block_count(n_layer)
w.add_feed_forward_length(n_ff)
w.add_head_count(n_head)
w.add_head_count_kv(n_head)
w.add_rope_dimension_count(n_embd // n_head)
w.add_layer_norm_rms_eps(1e-5)
w.add_file_type(gguf.LlamaFileType.ALL_F32)
w.add_tokenizer_model("llama")
w.add_token_list(tokens)
w.add_token_scores(scores)
w.add_token_types(types)
w.add_bos_token_id(1)
w.add_eos_token_id(eos)
w.add_unk_token_id(0)
w.add_add_bos_token(True)
w.add_add_eos_token(False)

def t(name, *shape, scale=0.2):
    w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

t("token_embd.weight", n_vocab, n_embd, scale=1.0)
w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
# Large, spread logits (a standard deviation near 8) so that a zero logit
# is practically never chosen.
out = (rng.standard_normal((n_vocab, n_embd)) * 0.5).astype(np.float32)
# Zero rows: end-of-sequence, unknown, and the byte tokens (a lone byte is
# not UTF-8), so the text is word pieces.
out[0 : 3 + 256, :] = 0.0
w.add_tensor("output.weight", out)
for i in range(n_layer):
    w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
    for n in ("attn_q", "attn_k", "attn_v", "attn_output"):
        t(f"blk.{i}.{n}.weight", n_embd, n_embd, scale=n_embd ** -0.5)
    t(f"blk.{i}.ffn_gate.weight", n_ff, n_embd, scale=n_embd ** -0.5)
    t(f"blk.{i}.ffn_up.weight", n_ff, n_embd, scale=n_embd ** -0.5)
    t(f"blk.{i}.ffn_down.weight", n_embd, n_ff, scale=n_ff ** -0.5)

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
PY
    mv "$model.tmp" "$model"
  fi
  flock -u 9
}

free_port() {
  "$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

stop() {
  local name="${1:-default}"
  local pidfile="$run/$name.pid"
  if [ -f "$pidfile" ]; then
    local pid
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile" "$run/$name.port"
    log "stopped $name"
  fi
}

start() {
  local name="${1:-default}"
  install
  stop "$name"
  # Logs of instances long gone.
  find "$run" -name '*.log' -mmin +1440 -delete 2>/dev/null || true
  local port logfile
  port=$(free_port)
  logfile="$run/$name.log"
  # One thread and a small context: the model is tiny, CI has two cores.
  # interrupt_requests=false: llama-cpp-python otherwise ends a running
  # stream early whenever another request queues behind it.
  # chatml-function-calling: plain chat, plus OpenAI tool calls.
  setsid "$venv/bin/python" -m llama_cpp.server \
    --model "$model" --model_alias aegis-tiny \
    --host 127.0.0.1 --port "$port" \
    --n_ctx "${AEGIS_LOCAL_LLM_N_CTX:-2048}" --n_threads 1 --n_threads_batch 1 \
    --n_batch 512 --chat_format chatml-function-calling \
    --interrupt_requests false --verbose true \
    </dev/null >"$logfile" 2>&1 &
  local pid=$!
  echo "$pid" >"$run/$name.pid"
  echo "$port" >"$run/$name.port"
  local deadline=$((SECONDS + ${AEGIS_LOCAL_LLM_READY_SECS:-60}))
  until curl -fsS -m 2 "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "the server exited; its log:"
      tail -n 40 "$logfile" >&2
      rm -f "$run/$name.pid" "$run/$name.port"
      exit 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      log "the server did not answer in time; its log:"
      tail -n 40 "$logfile" >&2
      stop "$name"
      exit 1
    fi
    sleep 0.2
  done
  if [ -n "${AEGIS_LOCAL_LLM_PARENT_PID:-}" ]; then
    local parent=$AEGIS_LOCAL_LLM_PARENT_PID
    setsid bash -c 'while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 1; done; kill "$2" 2>/dev/null' \
      _ "$parent" "$pid" </dev/null >/dev/null 2>&1 &
  fi
  log "$name ready on port $port"
  echo "pid=$pid"
  echo "log=$logfile"
  echo "http://127.0.0.1:$port/v1"
}

case "${1:-start}" in
  install) install ;;
  installed) [ -f "$venv/.installed" ] && [ -f "$model" ] ;;
  start) start "${2:-default}" ;;
  stop) stop "${2:-default}" ;;
  *)
    echo "usage: $0 [install | installed | start [NAME] | stop [NAME]]" >&2
    exit 2
    ;;
esac
