#!/usr/bin/env bash
# scripts/demo.sh - the main job on a fresh machine, end to end: Mooncake Store
# in its embedded default set-up, on loopback.
#
#   1. build (meson setup build-demo if it does not exist, then ninja);
#   2. start mooncake_master with its embedded HTTP metadata server, every
#      port chosen free by the master (port 0; it logs "listening rpc=..
#      metrics=.. metadata=..");
#   3. start two storage clients (store_node, each contributing a 256 MiB
#      segment): A and B;
#   4. A puts 64 objects of 1 MiB of pseudo-random data with their replicas
#      on B's segment (the bytes move through the Transfer Engine);
#      B reads every object back and compares it with the data A generated;
#      A reads them back too (zero-copy, over TCP again) and the XXH3 digests
#      of all three views must agree;
#   5. print objects, bytes and MB/s of each step and the master's
#      /metrics/summary, then shut down (clients quit, master SIGTERM) and
#      exit 0 -- or non-zero on any failure or mismatch.
#
# store_node (tests/integration/store_node.c) is a store client over the
# public API that takes one command per line on stdin and answers one line
# on stdout; this script talks to each through a pair of FIFOs.  The old
# Transfer-Engine-only demo is scripts/demo_te.sh.
#
# Environment: MC_DEMO_BUILD (build dir, default <repo>/build-demo),
# MC_DEMO_OBJECTS (default 64), MC_DEMO_OBJECT_KIB (default 1024),
# MC_LOG_LEVEL (library log level, default warn).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${MC_DEMO_BUILD:-$ROOT/build-demo}
OBJECTS=${MC_DEMO_OBJECTS:-64}
OBJ_KIB=${MC_DEMO_OBJECT_KIB:-1024}
TIMEOUT=60 # seconds allowed for any one step
export MC_LOG_LEVEL=${MC_LOG_LEVEL:-warn}
for v in "$OBJECTS" "$OBJ_KIB"; do
	case $v in
	'' | *[!0-9]*) echo "demo: MC_DEMO_OBJECTS and MC_DEMO_OBJECT_KIB must be numbers" >&2; exit 2 ;;
	esac
done
OBJ_SIZE=$((OBJ_KIB << 10))
TOTAL=$((OBJECTS * OBJ_SIZE))
if [ "$OBJECTS" -lt 1 ] || [ "$OBJ_KIB" -lt 1 ] || [ "$TOTAL" -gt $((192 << 20)) ]; then
	echo "demo: 1..192 MiB of data in all (B's segment has 256 MiB)" >&2
	exit 2
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/mooncake-demo.XXXXXX")
NODE_PIDS=()
NODE_VARS=(A B) # clients quitting unmount their segments
MASTER_PID=
# shellcheck source=scripts/demo_lib.sh
. "$ROOT/scripts/demo_lib.sh"
trap_cleanup

# --- 1. build ---------------------------------------------------------------
build_tree

MASTER=$BUILD/tools/mooncake_master
STORE_NODE=$BUILD/tests/integration/store_node
[ -x "$MASTER" ] || die "$MASTER was not built"
[ -x "$STORE_NODE" ] || die "$STORE_NODE was not built (is -Dtests=false set on $BUILD?)"
NODE_BIN=$STORE_NODE

# --- 2. master ---------------------------------------------------------------------
"$MASTER" --rpc_port=0 --rpc_address=127.0.0.1 --metrics_port=0 --metrics_host=127.0.0.1 \
	--enable_http_metadata_server=true --http_metadata_server_port=0 \
	--http_metadata_server_host=127.0.0.1 --enable_metric_reporting=false \
	</dev/null >/dev/null 2>"$WORK/master.log" &
MASTER_PID=$!
# The master logs its ports once it listens; wait for that line (bounded).
line=""
for _ in $(seq 1 $((TIMEOUT * 20))); do
	line=$(grep -m1 -o 'listening rpc=[0-9]* metrics=[0-9]* metadata=[0-9]*' "$WORK/master.log" || true)
	[ -n "$line" ] && break
	kill -0 "$MASTER_PID" 2>/dev/null || die "mooncake_master exited"
	sleep 0.05
done
[ -n "$line" ] || die "mooncake_master did not report its ports"
RPC=$(field "${line#listening }" rpc)
METRICS=$(field "${line#listening }" metrics)
META_PORT=$(field "${line#listening }" metadata)
META="http://127.0.0.1:$META_PORT/metadata"
say "== mooncake_master (pid $MASTER_PID): rpc 127.0.0.1:$RPC, metrics :$METRICS, metadata $META"

# --- 3. storage clients -------------------------------------------------------------
NODE_ARGS=(--master "127.0.0.1:$RPC" --metadata "$META" --host 127.0.0.1
	--segment 256m --buffer 64m --zbuf "$((OBJ_SIZE > (16 << 20) ? OBJ_SIZE : (16 << 20)))")
start_node A "${NODE_ARGS[@]}"
start_node B "${NODE_ARGS[@]}"
A_HOST=$(field "$A_INFO" hostname)
B_HOST=$(field "$B_INFO" hostname)
# From here a dead store_node makes our writes fail (and die) instead of
# killing us; set only now so the children keep the default SIGPIPE action.
trap '' PIPE
say "== client A: $A_HOST (pid $(field "$A_INFO" pid)), 256 MiB segment"
say "== client B: $B_HOST (pid $(field "$B_INFO" pid)), 256 MiB segment" \
	"(pre-faulted: MC_STORE_PREFAULT=${MC_STORE_PREFAULT:-mount})"

# --- 4. data ------------------------------------------------------------------------
SEED=20240601
say "== A puts $OBJECTS objects of $OBJ_KIB KiB, replicas on B's segment"
cmd A putn demo- "$OBJECTS" "$OBJ_SIZE" "$SEED" "seg=$B_HOST"
PUT=${REPLY#OK }
cmd A replicas demo-0
say "   demo-0 lives on: ${REPLY#OK n=1 }"
say "== B reads them back and compares with the generated data"
cmd B getn demo- "$OBJECTS" "$OBJ_SIZE" "$SEED"
GETB=${REPLY#OK }
say "== A reads them back (zero-copy) from B's segment"
cmd A getn demo- "$OBJECTS" "$OBJ_SIZE" "$SEED" zc
GETA=${REPLY#OK }
say "== A removes them and puts them again: the same bytes into memory B's segment has touched"
cmd A remove_all force
cmd A putn demo- "$OBJECTS" "$OBJ_SIZE" "$SEED" "seg=$B_HOST"
PUTW=${REPLY#OK }

printf '\n%-44s %8s %12s %10s %10s  %s\n' step objects bytes ms MB/s xxh3
for row in "A put -> B's segment, first fill (cold):$PUT" "B get, its own segment (local):$GETB" \
	"A get_into <- B's segment (other process):$GETA" "A put again, refill (warm):$PUTW"; do
	name=${row%%:*}
	f=${row#*:}
	printf '%-44s %8s %12s %10s %10s  %s\n' "$name" "$(field "$f" n)" "$(field "$f" bytes)" \
		"$(field "$f" ms)" "$(field "$f" mbps)" "$(field "$f" xxh3)"
done
printf '\n'

status=0
if [ "$(field "$PUTW" xxh3)" != "$(field "$PUT" xxh3)" ]; then
	say "MISMATCH: the refill put other bytes than the first fill"
	status=1
fi
for f in "$GETB" "$GETA"; do
	if [ "$(field "$f" bad)" != 0 ] || [ "$(field "$f" xxh3)" != "$(field "$PUT" xxh3)" ]; then
		say "MISMATCH: data read back differs from what was put ($f)"
		status=1
	fi
done

say "== curl -s http://127.0.0.1:$METRICS/metrics/summary"
if command -v curl >/dev/null; then
	curl -s --max-time 10 "http://127.0.0.1:$METRICS/metrics/summary" || say "(no answer)"
	printf '\n'
fi

# --- 5. shut down -------------------------------------------------------------------
say "== shutting down"
cmd A remove_all force
say "   removed ${REPLY#OK } objects"
quit_node A
quit_node B
for pid in "${NODE_PIDS[@]}"; do
	wait "$pid" || die "a store_node exited with status $?"
done
NODE_PIDS=()
kill -TERM "$MASTER_PID"
wait "$MASTER_PID" || die "mooncake_master exited with status $? after SIGTERM"
MASTER_PID=
if [ "$status" -eq 0 ]; then
	say "demo: OK, $OBJECTS objects ($((TOTAL >> 20)) MiB) stored by A on B, read back by both, all checksums match"
else
	say "demo: FAILED, checksums differ"
fi
exit "$status"
