#!/usr/bin/env bash
# The daemon, client, tokenizer and engine unit tests and the integration tests, built with
# AddressSanitizer (leaks included) and UndefinedBehaviorSanitizer in a build directory of their own,
# then the threaded ones (the scheduler, the worker pool, the daemon's event loop and its bridge to the
# engine) built with ThreadSanitizer. Any report fails the run.
#   scripts/sanitize.sh [--full] [BUILD_DIR]   BUILD_DIR default build/sanitize; its asan/ and tsan/ are
#                                              kept between runs (ccache makes a rebuild cheap)
# Without --full (what CI runs, `meson test sanitizers`): every unit test and every integration case under
# ASan; under TSan the thread pool, scheduler, prefix cache and runner cases, the daemon's unit tests and
# the eight daemon cases where its threads meet. --full runs every integration case under TSan as well.
# No suppressions: a report is a bug to fix. Optimisation -O1 without debug info keeps both builds
# small, their object files the same in every checkout (so ccache serves them), and the traces usable;
# the vectorised kernels are built at -O2 there (engine/meson.build), or the daemon would decode at a few
# tokens a second and the integration cases would take most of an hour; the ftllmd and ftllm-export the
# integration cases start link them uninstrumented (the unit tests check them instrumented).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
full=0
if [ "${1:-}" = --full ]; then
  full=1
  shift
fi
dir=${1:-$root/build/sanitize}
meson="$root/.venv/bin/meson"
cd "$root"

setup() {  # directory, sanitizers
  [ -f "$1/meson-private/coredata.dat" ] && return
  "$meson" setup "$1" --buildtype=plain -Doptimization=1 -Ddebug=false -Dcuda=disabled \
    -Db_sanitize="$2" -Db_lundef=false >/dev/null
}

build() {  # directory, targets...: quiet unless it fails
  local log
  log=$(mktemp)
  if ! "$meson" compile -C "$@" >"$log" 2>&1; then
    cat "$log"
    rm -f "$log"
    echo "sanitize: the build in $1 failed" >&2
    exit 1
  fi
  rm -f "$log"
}

join() { local IFS=:; echo "$*"; }
# Runs a meson test of a sanitized build directory, on some of its Boost.Test cases when given.
run() {  # directory, meson test name, cases...
  local build_dir=$1 name=$2
  shift 2
  local args=()
  (($#)) && args=("--test-args=--run_test=$(join "$@")")
  # Sanitized code runs several times slower: the tests' own time limits stretch to match.
  "$meson" test -C "$build_dir" --no-rebuild --print-errorlogs --timeout-multiplier 4 "$name" "${args[@]}"
}

# AddressSanitizer + UBSan: every test program but the GPU simulator's and the systemd unit checks.
setup "$dir/asan" address,undefined
build "$dir/asan" test_daemon test_client test_tokenizer test_engine test_integration ftllmd ftllmctl ftllm-export
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:halt_on_error=1:print_summary=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:print_summary=1
"$meson" test -C "$dir/asan" --no-rebuild --print-errorlogs --num-processes 2 --timeout-multiplier 4 \
  daemon client tokenizer engine
run "$dir/asan" integration

# ThreadSanitizer: the thread pool, the scheduler and prefix cache (Runner threads), the daemon's unit
# tests (event loop, worker pool, engine bridge), and the daemon itself where its threads meet.
setup "$dir/tsan" thread
build "$dir/tsan" test_engine test_daemon test_integration ftllmd ftllmctl ftllm-export
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
engine_cases=(thread_pool_covers_every_index_once thread_pool_work_flows_around_a_straggler
  thread_pool_jobs_do_not_wait_for_a_late_worker a_thread_late_for_a_finished_job_takes_nothing_from_the_next
  grouped_pool_gives_each_group_its_row_share thread_pool_leaves_out_threads_the_machine_has_no_core_for
  scheduler prefix_cache kv_pages_are_shared_and_returned
  a_request_prepared_before_its_model_loaded_runs_on_it transformers_fixtures/a_cancelled_waiting_request_stops_counting_at_once)
# The daemon where its threads meet: streams side by side, a client hanging up mid-stream, a full queue,
# clients gone from the queue, big bodies on the workers, load/unload and rebalance under streams, SIGTERM.
daemon_cases=(openai_api/parallel_streams_do_not_cross_talk openai_api/a_client_that_disconnects_frees_its_sequence
  openai_api/a_full_queue_answers_503_with_retry_after openai_api/requests_of_clients_gone_leave_the_queue
  openai_api/big_bodies_do_not_block_the_event_loop admin/load_serve_and_unload_while_others_stream
  admin/rebalance_during_a_stream_changes_nothing_but_the_threads admin/sigterm_drains_running_streams)
run "$dir/tsan" daemon
run "$dir/tsan" engine "${engine_cases[@]}"
if ((full)); then run "$dir/tsan" integration; else run "$dir/tsan" integration "${daemon_cases[@]}"; fi
