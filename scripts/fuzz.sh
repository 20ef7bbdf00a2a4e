#!/usr/bin/env bash
# Runs the fuzz targets of fuzz/ under libFuzzer (cargo-fuzz) on the stable
# toolchain: every target, or those named, for FUZZ_SECONDS (60) each.
#
#   scripts/fuzz.sh                  # all of them, a minute each
#   FUZZ_SECONDS=600 scripts/fuzz.sh h1_parse h1_response
#
# cargo-fuzz asks rustc for nightly-only flags (-Z); RUSTC_BOOTSTRAP=1 lets
# the stable compiler take them. FUZZ_SANITIZER (address by default, as
# cargo-fuzz's) picks the sanitizer; `none` builds faster. Inputs found go
# to fuzz/corpus/<target> (git-ignored), with fuzz/seeds/<target> read as
# a second corpus; a crash stops the script, its input in fuzz/artifacts/.
# The normal test suite runs the same targets' bodies over the seeds
# without libFuzzer (crates/weir/tests/fuzz_targets.rs).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz with cargo install"
    cargo install cargo-fuzz --locked
fi
export RUSTC_BOOTSTRAP=1
secs="${FUZZ_SECONDS:-60}"
sanitizer="${FUZZ_SANITIZER:-address}"
if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi
for t in "${targets[@]}"; do
    echo "== fuzz $t (${secs}s, sanitizer $sanitizer)"
    mkdir -p "fuzz/corpus/$t"
    cargo fuzz run --sanitizer "$sanitizer" "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
        -max_total_time="$secs"
done
