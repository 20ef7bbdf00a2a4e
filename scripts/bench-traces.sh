#!/usr/bin/env bash
# What OpenTelemetry tracing costs a proxy (BENCHMARKS.md, "The cost of
# tracing"), against a stand-in collector on port 4318: `weir-bench
# backend`, which reads each POST whole and answers 200 without decoding a
# span, so the collector's own work costs the generator's CPU little.
#
#   scripts/bench-traces.sh ab OUT [MODES] [ROUNDS]
#                                        # weir with [traces] ÷ the same build
#                                        # without, proxy scenario, sample 1.0
#                                        # and 0.01; MODES "pinned shared" and
#                                        # ROUNDS 5 unless given
#   scripts/bench-traces.sh outage OUT   # 14 min at 3,000 requests/s, traces
#                                        # at 100 %; the collector stops
#                                        # answering (SIGSTOP) from minute 2 to
#                                        # minute 12; RSS and the span counters
#                                        # every 10 s into OUT/rss.log
#
# Uses target/release/weir and weir-bench (WEIR=, BENCH= to change).
set -euo pipefail
cd "$(dirname "$0")/.."
WEIR=$(realpath "${WEIR:-target/release/weir}")
BENCH=$(realpath "${BENCH:-target/release/weir-bench}")
what=${1:?ab or outage}
out=$(realpath -m "${2:?output folder}")
mkdir -p "$out"
ulimit -n 20000
pids=()
trap 'kill -CONT "${pids[@]}" 2>/dev/null; kill "${pids[@]}" 2>/dev/null || true' EXIT

if [ "$what" = ab ]; then
    # The sink on the generator's CPU in pinned mode (weir-bench puts the
    # generator on CPU 0, the server on the rest): its work is not weir's.
    taskset -c 0 "$BENCH" backend --listen 127.0.0.1:4318 --size 2 > "$out/sink.log" 2>&1 & pids+=($!)
    for mode in ${3:-pinned shared}; do
        pin=(); [ "$mode" = pinned ] && pin=(--pin)
        for s in 1.0 0.01; do
            echo "== $mode, sample $s"
            "$BENCH" compare "${pin[@]}" --servers weir,weir-b --weir "$WEIR" --weir-b "$WEIR" \
                --scenarios proxy --repeats "${4:-5}" --duration 5s --warmup 2s --out "$out/$mode-$s" \
                --weir-sections "$(printf '[traces]\nendpoint = "http://127.0.0.1:4318/v1/traces"\nsample = %s' "$s")" |
                tail -8
        done
    done
    exit 0
fi

cd "$out"
"$BENCH" backend --listen 127.0.0.1:19000 > backend.log 2>&1 & pids+=($!)
"$BENCH" backend --listen 127.0.0.1:4318 --size 2 > sink.log 2>&1 & sink=$!; pids+=($sink)
cat > weir.toml <<CFG
[server]
workers = 1
[admin]
listen = "127.0.0.1:19019"
[traces]
endpoint = "http://127.0.0.1:4318/v1/traces"
sample = 1.0
[site."a.test"]
listen = "127.0.0.1:19080"
proxy = "127.0.0.1:19000"
CFG
"$WEIR" run --config weir.toml > weir.log 2>&1 & w=$!; pids+=($w)
for _ in $(seq 100); do curl -s -o /dev/null 127.0.0.1:19019/metrics && break; sleep 0.1; done
rss() { awk '/VmRSS/{print $2}' "/proc/$w/status"; }
spans() { curl -s 127.0.0.1:19019/metrics | grep -E '^weir_trace_spans_(exported|dropped)' | tr '\n' ' '; }
"$BENCH" load -c 20 --rate 3000 -d 840s --timeout 5s -H "Host: a.test" http://127.0.0.1:19080/ > load.txt 2>&1 &
load=$!
(for i in $(seq 0 83); do echo "$(date +%T) t=$((i * 10)) rss_kib=$(rss) $(spans)"; sleep 10; done) > rss.log &
sleep 120; echo "$(date +%T) collector stopped (SIGSTOP)" >> rss.log; kill -STOP "$sink"
sleep 600; echo "$(date +%T) collector back (SIGCONT)" >> rss.log; kill -CONT "$sink"
wait "$load"
cat load.txt rss.log
