#!/usr/bin/env bash
# Side-by-side resource use of vllm-sidecar and the reference Python sidecar.
#
# Both run at the same time against the same loopback stubs: a real etcd, and one small
# Python server playing vLLM (/health, /v1/models, /metrics with a real vLLM page) and the
# master (/v1/internal/heartbeat, always 200). Same intervals for both. After DURATION
# seconds the script reads, from /proc, each process's peak and current resident memory
# (VmHWM, VmRSS) and CPU time (schedstat), in total and for the steady state (from
# WARMUP seconds on), plus how many heartbeats each one delivered. Then SIGTERM for both.
#
# It downloads nothing: pass the directory that holds the reference's `vllm_sidecar/`
# package (its only dependency is `requests`).
#
#   sidecar/scripts/compare-reference.sh /path/with/vllm_sidecar [DURATION] [KEEPALIVE] [HEARTBEAT]
#
# DURATION defaults to 60 s, KEEPALIVE to 0.2 s and HEARTBEAT to KEEPALIVE; the lease TTL
# is the reference's default, 6 s. The reference's own defaults are KEEPALIVE 2, HEARTBEAT 3.
#
# Env: SIDECAR_BIN (default target/release/vllm-sidecar; build it with
# `cargo build --release -p sidecar`), METRICS_PAGE (default sidecar/fixtures/vllm-0.10-metrics.txt, the real vLLM page),
# STUB_NAGLE=1 (the stub answers with Nagle's algorithm on, unlike real servers: each
# answer's body then arrives a few ms after its head).
set -euo pipefail

REF_PARENT=${1:?usage: $0 DIR_CONTAINING_vllm_sidecar [DURATION_S] [KEEPALIVE_S] [HEARTBEAT_S]}
DURATION=${2:-60}
INTERVAL=${3:-0.2}
HEARTBEAT=${4:-$INTERVAL}
WARMUP=5
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${SIDECAR_BIN:-$ROOT/target/release/vllm-sidecar}
PAGE=${METRICS_PAGE:-$ROOT/sidecar/fixtures/vllm-0.10-metrics.txt}

[ -d "$REF_PARENT/vllm_sidecar" ] || { echo "no vllm_sidecar/ in $REF_PARENT" >&2; exit 2; }
[ -x "$BIN" ] || { echo "no binary at $BIN (cargo build --release -p sidecar)" >&2; exit 2; }
[ -f "$PAGE" ] || { echo "no metrics page at $PAGE" >&2; exit 2; }
command -v etcd >/dev/null || { echo "etcd not installed" >&2; exit 2; }
python3 -c 'import requests' 2>/dev/null || { echo "python3 requests missing" >&2; exit 2; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
WORK=$(mktemp -d)
PIDS=()
SIDECARS=()
cleanup() {
  # Sidecars first (they revoke their leases while etcd is still up), then the rest;
  # anything still running after 10 s is killed.
  for pid in "${SIDECARS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 100); do
    alive=0
    for pid in "${SIDECARS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for pid in "${SIDECARS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# etcd
EC=$(free_port); EP=$(free_port)
etcd --data-dir "$WORK/etcd" --listen-client-urls "http://127.0.0.1:$EC" \
  --advertise-client-urls "http://127.0.0.1:$EC" --listen-peer-urls "http://127.0.0.1:$EP" \
  --initial-advertise-peer-urls "http://127.0.0.1:$EP" --initial-cluster "default=http://127.0.0.1:$EP" \
  >"$WORK/etcd.log" 2>&1 &
PIDS+=($!)

# vLLM + master stub, one process, two ports.
VP=$(free_port); MP=$(free_port)
cat >"$WORK/stub.py" <<'EOF'
import json, os, sys, threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
vport, mport, page_path, counts_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
page = open(page_path, "rb").read()
counts = Counter()
lock = threading.Lock()
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Real servers answer with Nagle off (vLLM's uvicorn through asyncio, etcd and Go's
    # net/http); http.server leaves it on, which holds every body back until the head is
    # acknowledged. STUB_NAGLE=1 keeps it on, as measured before.
    disable_nagle_algorithm = os.environ.get("STUB_NAGLE") != "1"
    def log_message(self, *a): pass
    def reply(self, code, body=b"", ctype="text/plain"):
        self.send_response(code); self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_GET(self):
        if self.path == "/health": self.reply(200)
        elif self.path == "/metrics": self.reply(200, page, "text/plain; version=0.0.4; charset=utf-8")
        elif self.path == "/v1/models": self.reply(200, b'{"object":"list","data":[{"id":"m"}]}', "application/json")
        else: self.reply(404)
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n) or b"{}")
        counts[body.get("name", "?")] += 1
        with lock:  # written aside, then renamed: the reader never sees half a file
            with open(counts_path + ".tmp", "w") as f: json.dump(counts, f)
            os.replace(counts_path + ".tmp", counts_path)
        self.reply(200, b'{"ok":true}', "application/json")
for port in (vport, mport):
    threading.Thread(target=ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever, daemon=True).start()
threading.Event().wait()
EOF
python3 "$WORK/stub.py" "$VP" "$MP" "$PAGE" "$WORK/counts.json" &
PIDS+=($!)

for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$EC/health" >/dev/null 2>&1 && curl -sf "http://127.0.0.1:$VP/health" >/dev/null 2>&1 && break
  sleep 0.1
done

COMMON=(--etcd-endpoints "127.0.0.1:$EC" --vllm-url "http://127.0.0.1:$VP"
  --xllm-service-url "http://127.0.0.1:$MP" --lease-ttl 6
  --keepalive-interval "$INTERVAL" --heartbeat-interval "$HEARTBEAT")

(cd "$REF_PARENT" && exec python3 -m vllm_sidecar.sidecar "${COMMON[@]}" \
  --register-addr reference.local:18000 --log-level WARNING) >"$WORK/ref.log" 2>&1 &
REF=$!; SIDECARS+=($REF)
"$BIN" "${COMMON[@]}" --register-addr rust.local:18000 --log-level WARNING >"$WORK/rust.log" 2>&1 &
OURS=$!; SIDECARS+=($OURS)

# CPU time from the scheduler's own accounting, in ns, summed over the process's threads
# (`/proc/PID/task/*/schedstat`, first field): utime + stime in `/proc/PID/stat` counts in
# 10 ms ticks, too coarse for the sidecar's tenths of a second. Neither process starts
# threads that end before the reading (the sidecar's endpoints are IP literals here, so
# no resolver threads), so the sum covers all their CPU.
cpu() { cat /proc/"$1"/task/*/schedstat | awk '{ s += $1 } END { printf "%.4f", s / 1e9 }'; }
mem() { awk -v k="$2" '$1 == k":" { print $2 }' "/proc/$1/status"; }

sleep "$WARMUP"
REF_CPU0=$(cpu $REF); OURS_CPU0=$(cpu $OURS)
sleep $(( DURATION - WARMUP ))
REF_CPU=$(cpu $REF); OURS_CPU=$(cpu $OURS)
for p in REF OURS; do
  pid=${!p}
  eval "${p}_HWM=$(mem "$pid" VmHWM)"
  eval "${p}_RSS=$(mem "$pid" VmRSS)"
done

python3 - "$WORK/counts.json" "$DURATION" "$INTERVAL/$HEARTBEAT" "$WARMUP" \
  "$REF_HWM" "$REF_RSS" "$REF_CPU0" "$REF_CPU" "$OURS_HWM" "$OURS_RSS" "$OURS_CPU0" "$OURS_CPU" <<'EOF'
import json, sys
counts = json.load(open(sys.argv[1]))
dur, interval, warm = float(sys.argv[2]), sys.argv[3], float(sys.argv[4])
rh, rr, rc0, rc, oh, orr, oc0, oc = map(float, sys.argv[5:])
print(f"run: {dur:.0f} s, keepalive/heartbeat every {interval} s, lease TTL 6 s, real etcd + stub vLLM/master")
print(f"{'':26}{'reference (Python)':>20}{'vllm-sidecar':>16}{'ratio':>10}")
def row(name, a, b, unit, fmt="{:.1f}"):
    ratio = (a / b) if b else float("inf")
    print(f"{name:26}{(fmt.format(a) + unit):>20}{(fmt.format(b) + unit):>16}{ratio:>9.1f}x")
row("peak RSS (VmHWM)", rh / 1024, oh / 1024, " MiB")
row("RSS at end (VmRSS)", rr / 1024, orr / 1024, " MiB")
row("CPU total", rc, oc, " s", "{:.4f}")
row(f"CPU after {warm:.0f} s warm-up", rc - rc0, oc - oc0, " s", "{:.4f}")
print(f"heartbeats delivered: reference {counts.get('reference.local:18000', 0)}, "
      f"vllm-sidecar {counts.get('rust.local:18000', 0)}")
EOF

