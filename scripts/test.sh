#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this script).
#
# 1. installs what the end-to-end tests talk to (curl, nginx and its stream
#    module for the harness smoke test and the import differentials,
#    Varnish and HAProxy for its caching scenarios, php-fpm and Apache for
#    the PHP tests and scenario, h2load,
#    pebble for ACME, redis-server for the cluster tests, chromium for the
#    run report page,
#    systemd's systemd-analyze, passwd's useradd, binutils' objcopy and logrotate for
#    the Debian package test) from Debian's packages when missing,
#    pebble v2.10.1 (ACME Renewal Information) with `go install`,
#    and cargo-deb with `cargo install`;
# 2. checks formatting and lints;
# 3. builds the release binaries once and runs every test against them.
#
# A test never skips: if a tool is missing and cannot be installed, this
# script (or the test itself) fails and says what to install.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v nginx >/dev/null 2>&1 || need+=(nginx)
[ -f /usr/lib/nginx/modules/ngx_stream_module.so ] || need+=(libnginx-mod-stream)
command -v varnishd >/dev/null 2>&1 || need+=(varnish)
command -v haproxy >/dev/null 2>&1 || need+=(haproxy)
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v h2load >/dev/null 2>&1 || need+=(nghttp2-client)
command -v pebble >/dev/null 2>&1 || need+=(pebble)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
command -v useradd >/dev/null 2>&1 || need+=(passwd)
command -v objcopy >/dev/null 2>&1 || need+=(binutils)
command -v logrotate >/dev/null 2>&1 || need+=(logrotate)
compgen -G "/usr/sbin/php-fpm*" >/dev/null || need+=(php-fpm)
[ -x /usr/sbin/apache2 ] || need+=(apache2)
command -v caddy >/dev/null 2>&1 || need+=(caddy)
if [ "${#need[@]}" -gt 0 ]; then
    echo "== installing: ${need[*]}"
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -q || true
    $sudo apt-get install -y -q --no-install-recommends "${need[@]}"
fi

# Debian's pebble (2.4) has no ACME Renewal Information; the ARI test needs
# pebble v2.10.1, built from the Go module proxy into $(go env GOPATH)/pebble-ari
# (out of PATH, so it does not shadow Debian's pebble the other tests use).
pebble_ari_dir="$(go env GOPATH 2>/dev/null)/pebble-ari"
pebble_ari="$pebble_ari_dir/pebble"
if ! "$pebble_ari" -version >/dev/null 2>&1; then
    command -v go >/dev/null 2>&1 || { echo "Go is needed to build pebble with ARI (apt-get install golang)" >&2; exit 1; }
    echo "== installing pebble v2.10.1 (ARI) with go install"
    GOFLAGS=-mod=mod GOBIN="$pebble_ari_dir" go install github.com/letsencrypt/pebble/v2/cmd/pebble@v2.10.1
    "$pebble_ari" -version >/dev/null 2>&1 || { echo "pebble with ARI could not be installed" >&2; exit 1; }
fi

# The package test (crates/weir/tests/e2e/package.rs) builds the .deb with
# cargo-deb, installs it with dpkg (so the suite runs as root) and purges it.
if ! command -v cargo-deb >/dev/null 2>&1; then
    echo "== installing cargo-deb with cargo install"
    cargo install cargo-deb --locked
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy -D warnings"
cargo clippy --release --workspace --all-targets -- -D warnings

echo "== cargo test (release: the binaries are built once and reused by every end-to-end test)"
cargo test --release --workspace --no-fail-fast -- --test-threads="${WEIR_TEST_THREADS:-4}"
echo "== all tests passed"
