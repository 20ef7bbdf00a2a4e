#!/usr/bin/env bash
# weir vs HAProxy vs nginx as reverse proxies to the same upstream
# (`weir-bench backend`, 164-byte body), HTTP and HTTPS on the client side,
# wrk -t1 -c100, interleaved rounds in one run, 2 workers/threads each;
# prints medians, p99 and peak RSS. Used for the proxy table in BENCHMARKS.md.
#
#   bench/proxy-vs.sh [ROUNDS] [SECONDS]
set -euo pipefail
rounds=${1:-3}
secs=${2:-10}
root=$(cd "$(dirname "$0")/.." && pwd)
weir=$root/target/release/weir
bench=$root/target/release/weir-bench
for t in wrk nginx haproxy openssl; do
  command -v $t >/dev/null || { echo "needs $t (bash bench/setup)" >&2; exit 1; }
done
[ -x "$weir" ] && [ -x "$bench" ] || { echo "build first: cargo build --release" >&2; exit 1; }
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f $dir/nginx.pid ] && kill "$(cat $dir/nginx.pid)" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
openssl req -x509 -newkey rsa:2048 -nodes -keyout $dir/key.pem -out $dir/cert.pem -days 30 \
  -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null
cat $dir/cert.pem $dir/key.pem > $dir/combined.pem
up=127.0.0.1:19200
cat > $dir/weir.toml <<EOT
[server]
workers = 2
[site."http"]
listen = "127.0.0.1:19280"
proxy = { to = ["$up"] }
[site."https"]
listen = "127.0.0.1:19480"
proxy = { to = ["$up"] }
tls = { cert = "$dir/cert.pem", key = "$dir/key.pem" }
EOT
cat > $dir/haproxy.cfg <<EOT
global
  nbthread 2
  maxconn 9000
  ssl-default-bind-options ssl-min-ver TLSv1.2
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  http-reuse always
frontend fe
  bind 127.0.0.1:19281
  bind 127.0.0.1:19481 ssl crt $dir/combined.pem
  default_backend be
backend be
  server b1 $up
EOT
cat > $dir/nginx.conf <<EOT
worker_processes 2;
pid $dir/nginx.pid;
error_log $dir/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off; keepalive_requests 100000000;
  upstream backend { server $up; keepalive 64; }
  server {
    listen 127.0.0.1:19282; listen 127.0.0.1:19482 ssl;
    ssl_certificate $dir/cert.pem; ssl_certificate_key $dir/key.pem; ssl_protocols TLSv1.2 TLSv1.3;
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
EOT
"$bench" backend --listen $up --threads 1 2>$dir/backend.log & pids+=($!)
"$weir" run --config $dir/weir.toml 2>$dir/weir.log & wpid=$!; pids+=($wpid)
haproxy -f $dir/haproxy.cfg -db >$dir/haproxy.log 2>&1 & hpid=$!; pids+=($hpid)
nginx -c $dir/nginx.conf -p $dir >/dev/null 2>&1
sleep 1
for u in http://127.0.0.1:19280/ http://127.0.0.1:19281/ http://127.0.0.1:19282/ \
         https://127.0.0.1:19480/ https://127.0.0.1:19481/ https://127.0.0.1:19482/; do
  code=$(curl -sk -o /dev/null -w '%{http_code}' "$u")
  [ "$code" = 200 ] || { echo "$u answered $code" >&2; exit 1; }
done
rss() { local t=0; for p in "$@"; do t=$((t + $(awk '/VmRSS/{print $2}' /proc/$p/status))); done; echo $((t/1024)); }
ngx_pids() { echo $(cat $dir/nginx.pid) $(pgrep -P $(cat $dir/nginx.pid)); }
echo "idle RSS MiB: weir $(rss $wpid)  haproxy $(rss $hpid)  nginx (master+workers) $(rss $(ngx_pids))"
declare -A res
peak() { local max=0; while [ -f $dir/sampling ]; do r=$(rss $1); [ $r -gt $max ] && max=$r; echo $max > $dir/peak; sleep 0.2; done; }
for r in $(seq 1 $rounds); do
  for target in "weir http://127.0.0.1:19280/" "haproxy http://127.0.0.1:19281/" "nginx http://127.0.0.1:19282/" \
                "weir-tls https://127.0.0.1:19480/" "haproxy-tls https://127.0.0.1:19481/" "nginx-tls https://127.0.0.1:19482/"; do
    set -- $target
    case $1 in weir*) p=$wpid;; haproxy*) p=$hpid;; *) p="$(ngx_pids)";; esac
    touch $dir/sampling; peak "$p" & sp=$!
    out=$(wrk -t1 -c100 -d${secs}s --latency "$2" 2>&1)
    rm -f $dir/sampling; wait $sp 2>/dev/null || true
    rps=$(awk '/Requests\/sec/{print $2}' <<<"$out"); p99=$(awk '$1=="99%"{print $2}' <<<"$out")
    errs=$(awk '/Non-2xx|Socket errors/{printf "%s ", $0}' <<<"$out")
    [ -n "$errs" ] && echo "round $r $1: $errs" >&2
    res[$1]+="$rps/$p99 "; res[$1-rss]+="$(cat $dir/peak) "
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf '| proxy | req/s per round | median req/s | p99 per round | peak RSS MiB |\n|---|---|---|---|---|\n'
for k in weir haproxy nginx weir-tls haproxy-tls nginx-tls; do
  rps=$(for x in ${res[$k]}; do echo ${x%/*}; done | paste -sd' ')
  p99=$(for x in ${res[$k]}; do echo ${x#*/}; done | paste -sd' ')
  echo "| $k | $rps | $(echo $rps | median) | $p99 | ${res[$k-rss]} |"
done
