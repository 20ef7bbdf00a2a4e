#!/usr/bin/env bash
# HTTP/3 against HTTP/2 on one weir, one TLS site and one 1 KiB page, in the
# same run (BENCHMARKS.md's HTTP/3 section), and the memory an idle
# connection of each holds.
#
#   scripts/bench-h3.sh rate shared|pinned [ROUNDS]   # h2, then h3, per round
#   scripts/bench-h3.sh idle                          # 1,000 idle connections each
#
# Shared: 2 workers, the generator beside them on the same 2 cores. Pinned:
# 1 worker on CPU 0, the generator on CPU 1. Uses target/release/weir and
# weir-bench; port 28443 on localhost.
set -euo pipefail
cd "$(dirname "$0")/.."
WEIR=${WEIR:-target/release/weir}
BENCH=${BENCH:-target/release/weir-bench}
PORT=28443
what=${1:?rate or idle}
mode=${2:-shared}
rounds=${3:-3}
dir=$(mktemp -d)
trap 'kill "$wpid" 2>/dev/null; wait "$wpid" 2>/dev/null; rm -rf "$dir"' EXIT
mkdir -p "$dir/www"
head -c 768 /dev/urandom | base64 -w 80 > "$dir/www/index.html"

workers=2 srv=() gen=()
if [ "$mode" = pinned ]; then workers=1 srv=(taskset -c 0) gen=(taskset -c 1); fi
cat > "$dir/weir.toml" <<CFG
[server]
workers = $workers
[tls]
storage = "$dir/storage"
[site."https://localhost:$PORT"]
root = "$dir/www"
CFG
ulimit -n 20000
WEIR_LOG=weir=warn "${srv[@]}" "$WEIR" run --config "$dir/weir.toml" > "$dir/weir.log" 2>&1 &
wpid=$!
for _ in $(seq 100); do
    curl -sk "https://localhost:$PORT/" -o /dev/null && break
    sleep 0.1
done
url=https://localhost:$PORT/index.html
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

if [ "$what" = rate ]; then
    echo "mode $mode, $workers worker(s), $rounds rounds: -k -c 10 --streams 10 -d 10s --warmup 2s"
    for r in $(seq "$rounds"); do
        for p in h2 http3; do
            "${gen[@]}" "$BENCH" load --$p -k -c 10 --streams 10 -d 10s --warmup 2s --json "$url" > "$dir/$p.json"
            eval "$p=$(field "$dir/$p.json" "round(d['requests_per_sec'])")"
            echo "round $r $p: $(field "$dir/$p.json" "round(d['requests_per_sec'])") req/s, errors $(field "$dir/$p.json" "sum(d['errors'].values())")"
        done
        echo "round $r http3/h2: $(python3 -c "print(round($http3 / $h2, 2))")"
    done
else
    rss() { awk '/VmRSS/{print $2}' "/proc/$wpid/status"; }
    # Warm both protocols so lazily made state is there before the baseline.
    "$BENCH" load --h2 -k -c 10 -n 200 "$url" > /dev/null
    "$BENCH" load --http3 -k -c 10 -n 200 "$url" > /dev/null
    for p in h2 http3; do
        base=$(rss)
        # 1,000 connections, 20 requests/s among them: idle, but held open.
        "$BENCH" load --$p -k -c 1000 --rate 20 -d 14s --warmup 6s --timeout 60s --json "$url" > "$dir/idle-$p.json" &
        bp=$!
        # Read the held size in the measured part, every connection open.
        sleep 12
        held=$(rss)
        wait "$bp"
        echo "$p: RSS $base KiB before, $held KiB with 1,000 idle connections: $(( (held - base) / 1000 )) KiB each;" \
            "opened $(field "$dir/idle-$p.json" "d['connections_opened']"), errors $(field "$dir/idle-$p.json" "d['errors']")"
        sleep 3
    done
fi
