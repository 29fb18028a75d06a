#!/usr/bin/env bash
# ThreadSanitizer over rpma-mem's racing VolatileSlice test (crates/rpma-mem/tests/volatile_race.rs:
# threads copying through one view while another stores words; rule M2 of docs/memory.md).
# Fails if the test fails or if ThreadSanitizer reports anything (a data race on the view's bytes
# is what it would find: a copy that is not made of atomic accesses).
#
# Usage: scripts/tsan.sh   (with the nightly toolchain if rustup has one; else with the default
# toolchain and RUSTC_BOOTSTRAP=1 for this build only, as -Zsanitizer is a nightly flag)
# Environment: TSAN_TARGET_DIR [target/tsan], its own target directory, so that the sanitizer's
# flags do not invalidate the main build; TSAN_LOG [a temporary file], the full output.
#
# std is not rebuilt with the sanitizer (no -Zbuild-std, no rust-src needed): the accesses of the
# test and of rpma-mem are instrumented, std's own are not (its thread spawn and join reach
# ThreadSanitizer through the pthread calls it intercepts). -Cunsafe-allow-abi-mismatch lets the
# instrumented crates link against that std. scripts/valgrind.sh tsan runs the mock's tests with
# a rebuilt std.
set -euo pipefail
cd "$(dirname "$0")/.."

target_dir=${TSAN_TARGET_DIR:-target/tsan}
log=${TSAN_LOG:-$(mktemp)}
supp=$(mktemp)
trap 'rm -f "$supp"; [ -n "${TSAN_LOG:-}" ] || rm -f "$log"' EXIT
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    toolchain=(+nightly)
else
    toolchain=()
    export RUSTC_BOOTSTRAP=1
fi
host=$(rustc "${toolchain[@]}" -vV | sed -n 's/^host: //p')

# Reports that come from std not being instrumented, never from the code under test:
# - an Arc of std's threads (the thread, its result packet, a scope) orders its last decrement
#   with an acquire fence, which ThreadSanitizer does not model (a rebuilt std uses an acquire
#   load under the sanitizer): the free by the last owner looks unordered with the other
#   thread's decrement;
# - libtest hands each test's result to its main thread through a channel of the uninstrumented
#   std.
# Neither can hide a race on a VolatileSlice's bytes: no frame of one is in a drop of std's
# thread Arcs nor in libtest's result.
# history_size=7 (the largest): ThreadSanitizer drops a race whose earlier access has left its
# per-thread history, which the default size often does here (the test makes many accesses);
# with it, the old plain-memcpy copies were reported in 12 runs of 12, against 5 of 6 without.
printf '%s\n' 'race:alloc::sync::Arc<std::thread::' 'race:test::event::CompletedTest' >"$supp"

status=0
RUSTFLAGS="-Zsanitizer=thread -Cunsafe-allow-abi-mismatch=sanitizer" \
    TSAN_OPTIONS="suppressions=$supp history_size=7 ${TSAN_OPTIONS:-}" \
    cargo "${toolchain[@]}" test -q -p rpma-mem --test volatile_race --target "$host" --target-dir "$target_dir" \
    >"$log" 2>&1 || status=$?

reports=$(grep -c 'WARNING: ThreadSanitizer' "$log" || true)
if [ "$reports" -gt 0 ]; then
    echo "tsan: $reports ThreadSanitizer report(s); the first:" >&2
    sed -n '/WARNING: ThreadSanitizer/,/^SUMMARY/p' "$log" | grep -E 'WARNING|of size|#[0-4] ' |
        sed -E 's/ \((volatile_race-[^)]*|BuildId: [^)]*)\)//g' | head -n 13 >&2 || true
    grep '^SUMMARY: ThreadSanitizer' "$log" | sed 's/^SUMMARY: ThreadSanitizer: //' | sort | uniq -c >&2
    exit 1
fi
if [ "$status" -ne 0 ]; then
    echo "tsan: the test failed (exit $status), without a ThreadSanitizer report:" >&2
    tail -n 40 "$log" >&2
    exit 1
fi
echo "tsan: volatile_race clean, no ThreadSanitizer report ($(grep -h '^test result:' "$log" | tail -n 1 | cut -d';' -f1-2))"
