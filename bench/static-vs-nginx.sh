#!/usr/bin/env bash
# weir (per-core and shared runtimes) vs nginx on the 164-byte page, HTTP and
# HTTPS, wrk -t1 -c100, interleaved rounds in one run; prints a table of
# medians and RSS. Used for the core-server figures in BENCHMARKS.md.
#
#   bench/static-vs-nginx.sh [ROUNDS] [SECONDS]
set -euo pipefail
rounds=${1:-3}
secs=${2:-15}
root=$(cd "$(dirname "$0")/.." && pwd)
weir=$root/target/release/weir
command -v wrk >/dev/null && command -v nginx >/dev/null || { echo "needs wrk and nginx (bench/setup)" >&2; exit 1; }
[ -x "$weir" ] || { echo "build first: cargo build --release -p weir" >&2; exit 1; }
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; [ -f $dir/nginx.pid ] && kill $(cat $dir/nginx.pid) 2>/dev/null; rm -rf $dir' EXIT
mkdir -p $dir/www
printf '%s\n' '<!DOCTYPE html><html><head><title>Benchmark</title></head><body><h1>Hello from the benchmark page</h1><p>This page is exactly one hundred sixty four bytes.</p></bo' > $dir/www/index.html
openssl req -x509 -newkey rsa:2048 -nodes -keyout $dir/key.pem -out $dir/cert.pem -days 30 -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null
for mode in per-core shared; do
  cat > $dir/weir-$mode.toml <<EOT
[server]
workers = 2
runtime = "$mode"
[site."http"]
listen = "127.0.0.1:$([ $mode = per-core ] && echo 19080 || echo 19082)"
root = "$dir/www"
[site."https"]
listen = "127.0.0.1:$([ $mode = per-core ] && echo 19443 || echo 19445)"
root = "$dir/www"
tls = { cert = "$dir/cert.pem", key = "$dir/key.pem" }
EOT
done
cat > $dir/nginx.conf <<EOT
worker_processes 2;
pid $dir/nginx.pid;
error_log $dir/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off; sendfile on; keepalive_requests 100000000;
  include /etc/nginx/mime.types;
  server { listen 127.0.0.1:19081; listen 127.0.0.1:19444 ssl; ssl_certificate $dir/cert.pem; ssl_certificate_key $dir/key.pem; ssl_protocols TLSv1.2 TLSv1.3; root $dir/www; }
}
EOT
"$weir" run --config $dir/weir-per-core.toml 2>$dir/w1.log & wpc=$!
"$weir" run --config $dir/weir-shared.toml 2>$dir/w2.log & wsh=$!
nginx -c $dir/nginx.conf -p $dir >/dev/null 2>&1
sleep 1
rss() { local t=0; for p in "$@"; do t=$((t + $(awk '/VmRSS/{print $2}' /proc/$p/status))); done; echo $((t/1024)); }
ngx_pids() { echo $(cat $dir/nginx.pid) $(pgrep -P $(cat $dir/nginx.pid)); }
echo "idle RSS MiB: weir per-core $(rss $wpc)  weir shared $(rss $wsh)  nginx (master+workers) $(rss $(ngx_pids))"
declare -A res
run() { # name url
  local out; out=$(wrk -t1 -c100 -d${secs}s --latency "$2" 2>&1)
  local rps p99; rps=$(awk '/Requests\/sec/{print $2}' <<<"$out"); p99=$(awk '$1=="99%"{print $2}' <<<"$out")
  res[$1]+="$rps/$p99 "
}
peak() { local pid_list="$1" max=0; while kill -0 $$ 2>/dev/null && [ -f $dir/sampling ]; do r=$(rss $pid_list); [ $r -gt $max ] && max=$r; echo $max > $dir/peak; sleep 0.2; done; }
for r in $(seq 1 $rounds); do
  for target in "weir-per-core http://127.0.0.1:19080/" "nginx http://127.0.0.1:19081/" "weir-shared http://127.0.0.1:19082/" \
                "weir-per-core-tls https://127.0.0.1:19443/" "nginx-tls https://127.0.0.1:19444/" "weir-shared-tls https://127.0.0.1:19445/"; do
    set -- $target
    case $1 in weir-per-core*) pids=$wpc;; weir-shared*) pids=$wsh;; *) pids=$(ngx_pids);; esac
    touch $dir/sampling; peak "$pids" & sp=$!
    run $1 $2
    rm -f $dir/sampling; wait $sp 2>/dev/null || true
    res[$1-rss]+="$(cat $dir/peak) "
  done
done
printf '| server | req/s per round | p99 per round | peak RSS MiB per round |\n|---|---|---|---|\n'
for k in weir-per-core nginx weir-shared weir-per-core-tls nginx-tls weir-shared-tls; do
  rps=$(for x in ${res[$k]}; do echo ${x%/*}; done | paste -sd' ')
  p99=$(for x in ${res[$k]}; do echo ${x#*/}; done | paste -sd' ')
  echo "| $k | $rps | $p99 | ${res[$k-rss]} |"
done
