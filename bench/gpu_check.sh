#!/usr/bin/env bash
# bench/gpu_check.sh - the GPU checks in one go: the CUDA round-trip tests
# (tests/unit/test_devmem.c built against the real backend, cudaMalloc'ed
# memory over TCP, the same-host path and the local path, every byte
# checked), then GPU-to-GPU against host-to-host bandwidth through
# transfer_engine_bench over loopback TCP (and the same-host path).
# docs/benchmarks.md ("GPU memory") records what it printed.
#
# Usage:
#   bench/gpu_check.sh [BUILD]     build with CUDA (release) into BUILD
#                                  (default build-gpu-check), then run
#   bench/gpu_check.sh bundle DIR  build here (no GPU needed) and copy the
#                                  programs and the shared libraries they
#                                  load into DIR, for a GPU machine that
#                                  lacks the build dependencies
#   bench/gpu_check.sh run DIR     run from DIR (a bundle or a build directory)
#
# Environment: GPU_CHECK_DURATION (seconds per bench run, 4),
# GPU_CHECK_BLOCKS (block sizes, "65536 1048576 4194304"), GPU_CHECK_BATCH
# (32), GPU_CHECK_THREADS (4), GPU_CHECK_BUFFER (bytes per side, 512 MiB),
# GPU_CHECK_GPU (device, 0).  MC_* variables reach the engines as usual.
#
# Output: the test program's verdict, then one line per case,
#   gpu-check <op> <host|gpu> <tcp|shm> block=<B>: <X> GB/s
# and per op, path and block the GPU/host ratio.  Exit status: non-zero
# when the tests failed or a bench run did; 77 when there is no GPU.
set -uo pipefail

cd "$(dirname "$0")/.."

DURATION=${GPU_CHECK_DURATION:-4}
BLOCKS=${GPU_CHECK_BLOCKS:-"65536 1048576 4194304"}
BATCH=${GPU_CHECK_BATCH:-32}
THREADS=${GPU_CHECK_THREADS:-4}
BUFFER=${GPU_CHECK_BUFFER:-$((512 << 20))}
GPU=${GPU_CHECK_GPU:-0}

die() { echo "gpu_check: $*" >&2; exit 1; }

build()
{
	local dir=$1
	if [ -f "$dir/meson-private/coredata.dat" ]; then
		meson setup --reconfigure "$dir" -Dcuda=enabled --buildtype=release \
			-Dpython=disabled >/dev/null || die "meson setup failed"
	else
		meson setup "$dir" -Dcuda=enabled --buildtype=release -Dpython=disabled \
			>/dev/null || die "meson setup failed"
	fi
	ninja -C "$dir" tools/transfer_engine_bench tests/unit/test_gpu \
		tests/unit/test_devmem >/dev/null || die "build failed"
}

# bundle DIR: programs in DIR/bin, libmooncake and every non-glibc library
# they load (as ldd sees them here) in DIR/lib.
bundle()
{
	local out=$1 build=build-gpu-check f lib
	build "$build"
	rm -rf "$out"
	mkdir -p "$out/bin" "$out/lib"
	set -- "$build/tools/transfer_engine_bench" "$build/tests/unit/test_gpu" \
		"$build/tests/unit/test_devmem"
	cp "$@" "$out/bin/"
	for f in "$@"; do
		ldd "$f" | awk '/=> \// { print $3 }'
	done | sort -u | while read -r lib; do
		case $(basename "$lib") in
		libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | \
			libresolv.so.* | ld-linux*) ;;
		*) cp -L "$lib" "$out/lib/" ;;
		esac
	done
	du -sh "$out"
}

# start_target FILE ARGS...: a target in the background, its stdout (the
# segment name) in FILE, its pid in TARGET_PID.
start_target()
{
	local file=$1
	shift
	"$BENCH" --mode=target --metadata_server=P2PHANDSHAKE --local_server_name=127.0.0.1 \
		--buffer_size="$BUFFER" --gpu_id="$GPU" "$@" >"$file" &
	TARGET_PID=$!
}

# segment_of FILE: the name the target printed there (waits up to 60 s)
segment_of()
{
	local i
	for i in $(seq 600); do
		[ -s "$1" ] && break
		sleep 0.1
	done
	head -n 1 "$1"
}

# bench_case OP MEM PATH BLOCK SEGMENT: one initiator run, prints its line
bench_case()
{
	local op=$1 mem=$2 path=$3 block=$4 seg=$5 extra=() out gbs
	[ "$mem" = gpu ] && extra+=(--use_vram)
	[ "$path" = tcp ] && extra+=(--noshm)
	out=$("$BENCH" --mode=initiator --metadata_server=P2PHANDSHAKE \
		--local_server_name=127.0.0.1 --segment_id="$seg" --operation="$op" \
		--block_size="$block" --batch_size="$BATCH" --threads="$THREADS" \
		--duration="$DURATION" --buffer_size="$BUFFER" --gpu_id="$GPU" "${extra[@]}" 2>&1)
	gbs=$(printf '%s\n' "$out" | sed -n 's/.*throughput \([0-9.]*\) GB\/s.*/\1/p')
	if [ -z "$gbs" ]; then
		printf '%s\n' "$out" | tail -3 >&2
		echo "gpu-check $op $mem $path block=$block: FAILED"
		return 1
	fi
	echo "gpu-check $op $mem $path block=$block: $gbs GB/s"
	RESULT["$op $mem $path $block"]=$gbs
}

run()
{
	local dir=$1 rc=0 test_rc seg_host seg_gpu op path block h g
	local -A RESULT
	if [ -d "$dir/bin" ]; then
		BENCH=$dir/bin/transfer_engine_bench
		TEST=$dir/bin/test_gpu
		EMU=$dir/bin/test_devmem
		export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	else
		BENCH=$dir/tools/transfer_engine_bench
		TEST=$dir/tests/unit/test_gpu
		EMU=$dir/tests/unit/test_devmem
	fi
	[ -x "$BENCH" ] && [ -x "$TEST" ] || die "no programs in $dir"
	command -v nvidia-smi >/dev/null && nvidia-smi -L
	export MC_LOG_LEVEL=${MC_LOG_LEVEL:-warn}

	echo "== emulated-device tests (test_devmem)"
	"$EMU" >/tmp/gpu_check_emu.log 2>&1
	echo "test_devmem exit $? ($(grep -c '^\[       OK' /tmp/gpu_check_emu.log) passed)"
	echo "== CUDA round-trip tests (test_gpu)"
	"$TEST" 2>&1 | grep -v '^\[ RUN'
	test_rc=${PIPESTATUS[0]}
	echo "test_gpu exit $test_rc"
	if [ "$test_rc" = 77 ]; then
		echo "no CUDA device: nothing to measure"
		return 77
	fi
	[ "$test_rc" = 0 ] || rc=1

	echo "== bandwidth: threads=$THREADS batch=$BATCH duration=${DURATION}s buffer=$BUFFER"
	start_target /tmp/gpu_check_host.$$
	local host_pid=$TARGET_PID
	start_target /tmp/gpu_check_gpu.$$ --use_vram
	local gpu_pid=$TARGET_PID
	seg_host=$(segment_of /tmp/gpu_check_host.$$)
	seg_gpu=$(segment_of /tmp/gpu_check_gpu.$$)
	rm -f /tmp/gpu_check_host.$$ /tmp/gpu_check_gpu.$$
	if [ -z "$seg_host" ] || [ -z "$seg_gpu" ]; then
		kill "$host_pid" "$gpu_pid" 2>/dev/null
		die "a target did not start"
	fi
	for op in write read; do
		for path in tcp shm; do
			for block in $BLOCKS; do
				bench_case "$op" host "$path" "$block" "$seg_host" || rc=1
				bench_case "$op" gpu "$path" "$block" "$seg_gpu" || rc=1
			done
		done
	done
	kill -INT "$host_pid" "$gpu_pid" 2>/dev/null
	wait "$host_pid" "$gpu_pid" 2>/dev/null

	echo "== GPU-to-GPU / host-to-host"
	for op in write read; do
		for path in tcp shm; do
			for block in $BLOCKS; do
				h=${RESULT["$op host $path $block"]:-}
				g=${RESULT["$op gpu $path $block"]:-}
				[ -n "$h" ] && [ -n "$g" ] || continue
				awk -v op="$op" -v p="$path" -v b="$block" -v h="$h" -v g="$g" \
					'BEGIN { printf "gpu-check ratio %s %s block=%s: gpu %.2f / host %.2f GB/s = %.2f\n", op, p, b, g, h, (h > 0 ? g / h : 0) }'
			done
		done
	done
	return $rc
}

case ${1:-} in
bundle)
	[ $# -eq 2 ] || die "usage: $0 bundle DIR"
	bundle "$2"
	;;
run)
	[ $# -eq 2 ] || die "usage: $0 run DIR"
	run "$2"
	;;
*)
	dir=${1:-build-gpu-check}
	build "$dir"
	run "$dir"
	;;
esac
