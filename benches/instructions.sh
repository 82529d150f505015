#!/bin/sh
# Instructions per input byte under callgrind (deterministic, unlike MB/s on a shared
# machine). Usage: benches/instructions.sh [MODE...]; builds the example in release.
set -e
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/instructions} CARGO_PROFILE_RELEASE_DEBUG=line-tables-only
cargo build -q --release -p benches --example instructions
bin=$CARGO_TARGET_DIR/release/examples/instructions
N=${N:-50}
for file in sidecar/fixtures/vllm-0.10-metrics.txt sidecar/fixtures/large.prom; do
  size=$(wc -c < "$file")
  n=$N
  [ "$size" -gt 200000 ] && n=$((N / 10 + 1))
  for mode in ${*:-lenient strict avg p99}; do
    ir() {
      valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$mode" "$file" "$1" 2>&1 \
        | sed -n 's/.*Collected : *\([0-9]*\).*/\1/p'
    }
    a=$(ir 0); b=$(ir "$n")
    echo "$(basename "$file") $mode: $(echo "scale=2; ($b - $a) / ($n * $size)" | bc) instr/byte"
  done
done
