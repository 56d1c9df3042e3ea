#!/usr/bin/env bash
# Build and test Mooncake three ways, as CI does (docs: STYLE 3.13):
#   release  gcc, --buildtype=release, -Dwerror=true, every suite
#   asan     gcc, -Db_sanitize=address,undefined, leak checks on, every suite
#   tsan     clang-14, -Db_sanitize=thread, the suites that run threads (unit, integration)
# The sanitizer stages set MC_TEST_QUICK=1: integration cases marked slow (repeats of
# a path another case covers) run in the release stage only.
# Build directories: build-ci-release, build-ci-asan, build-ci-tsan (reused when present).
# The last line printed is "N passed, N failed" over all stages; the exit
# status is non-zero when a build or a test failed.
#
# Usage: scripts/test.sh [STAGE...]     (default: release asan tsan)
# Environment: MC_CI_JOBS (ninja -j, default: ninja's own), MC_CI_TEST_PROCS (default 2).
set -uo pipefail

cd "$(dirname "$0")/.."

# Debian's python3 (with python3-pytest, numpy, meson-python from scripts/install-deps.sh)
# first, ahead of any pyenv/virtualenv python that a developer machine puts in PATH.
export PATH="/usr/bin:/bin:$PATH"

STAGES=("$@")
[ ${#STAGES[@]} -gt 0 ] || STAGES=(release asan tsan)
TEST_PROCS=${MC_CI_TEST_PROCS:-2}
NINJA_ARGS=()
[ -n "${MC_CI_JOBS:-}" ] && NINJA_ARGS=(-j "$MC_CI_JOBS")

SUMMARY_ARGS=()
TIMINGS=()

log() { printf '\n=== %s ===\n' "$*"; }

# setup_dir DIR ARGS...: configure DIR, reconfiguring (or wiping) an existing one.
setup_dir()
{
	local dir=$1
	shift
	if [ -f "$dir/meson-private/coredata.dat" ]; then
		meson setup --reconfigure "$dir" "$@" ||
			meson setup --wipe "$dir" "$@"
	else
		rm -rf "$dir"
		meson setup "$dir" "$@"
	fi
}

# suites_present DIR WANTED...: print those WANTED suites that DIR defines.
suites_present()
{
	local dir=$1
	shift
	meson introspect --tests "$dir" | python3 -c '
import json, sys
have = set()
for t in json.load(sys.stdin):
    for s in t.get("suite", []):
        have.add(s.split(":", 1)[-1])
print(" ".join(w for w in sys.argv[1:] if w in have))
' "$@"
}

# run_stage NAME DIR CC SETUP_ARGS -- TEST_ARGS
run_stage()
{
	local name=$1 dir=$2 compiler=$3
	shift 3
	local setup_args=() test_args=()
	while [ $# -gt 0 ] && [ "$1" != "--" ]; do
		setup_args+=("$1")
		shift
	done
	[ $# -gt 0 ] && shift
	test_args=("$@")

	local t0 t1 t2 status=ok rc=-1
	t0=$(date +%s)
	log "$name: setup ($compiler ${setup_args[*]})"
	# CC only matters when the directory is first configured; meson keeps its compiler.
	if ! CC=$compiler setup_dir "$dir" "${setup_args[@]}"; then
		status=setup-failed
	else
		log "$name: build"
		ninja -C "$dir" "${NINJA_ARGS[@]}" || status=build-failed
	fi
	t1=$(date +%s)

	if [ "$status" = ok ]; then
		rm -f "$dir/meson-logs/testlog.json"
		local suite_args=()
		if [ "${STAGE_SUITES+set}" = set ]; then
			local s found
			found=$(suites_present "$dir" $STAGE_SUITES)
			for s in $found; do
				suite_args+=(--suite "$s")
			done
			if [ -z "$found" ]; then
				echo "$name: none of the suites '$STAGE_SUITES' exist yet, nothing to run"
				status=no-tests
			fi
		fi
		if [ "$status" = ok ]; then
			log "$name: test ${suite_args[*]:-(all suites)}"
			"${STAGE_WRAPPER[@]}" meson test -C "$dir" --num-processes "$TEST_PROCS" \
				--print-errorlogs "${suite_args[@]}" "${test_args[@]}" </dev/null
			rc=$?
		fi
	fi
	t2=$(date +%s)
	TIMINGS+=("$(printf '%-8s setup+build %4ss  test %4ss  total %4ss' \
		"$name" $((t1 - t0)) $((t2 - t1)) $((t2 - t0)))")
	SUMMARY_ARGS+=(--stage "$name" "$dir" "$status" "$rc")
}

symbolizer=/usr/lib/llvm-14/bin/llvm-symbolizer
[ -x "$symbolizer" ] || symbolizer=$(command -v llvm-symbolizer || true)

T_START=$(date +%s)
for stage in "${STAGES[@]}"; do
	unset STAGE_SUITES
	STAGE_WRAPPER=(env)
	case $stage in
	release)
		run_stage release build-ci-release gcc \
			--buildtype=release -Dwerror=true
		;;
	asan)
		export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:halt_on_error=1:detect_stack_use_after_return=1${symbolizer:+:external_symbolizer_path=$symbolizer}"
		export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
		export LSAN_OPTIONS="print_suppressions=0"
		export MC_TEST_QUICK=1 # slow repeats run in the release stage (tests/integration/conftest.py)
		run_stage asan build-ci-asan gcc \
			-Db_sanitize=address,undefined -Db_lundef=false \
			-- --timeout-multiplier 2
		unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS MC_TEST_QUICK
		;;
	tsan)
		export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp${symbolizer:+:external_symbolizer_path=$symbolizer}"
		# LLVM 14's TSan cannot map its shadow with more than 28 bits of mmap
		# randomisation ("unexpected memory mapping"); run without ASLR there.
		if [ "$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 28)" -gt 28 ]; then
			STAGE_WRAPPER=(setarch "$(uname -m)" -R)
		fi
		STAGE_SUITES="unit integration"
		export MC_TEST_QUICK=1
		run_stage tsan build-ci-tsan clang-14 \
			-Db_sanitize=thread -Db_lundef=false -Dwerror=true \
			-- --timeout-multiplier 3
		unset TSAN_OPTIONS STAGE_SUITES MC_TEST_QUICK
		;;
	*)
		echo "test.sh: unknown stage '$stage' (release, asan, tsan)" >&2
		exit 2
		;;
	esac
done
T_END=$(date +%s)

log "stage timings"
printf '%s\n' "${TIMINGS[@]}"
echo "all stages: $((T_END - T_START))s"
echo
exec python3 scripts/ci-summary.py "${SUMMARY_ARGS[@]}"
