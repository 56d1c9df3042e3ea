#!/usr/bin/env bash
# scripts/demo_te.sh - the Transfer Engine on its own, end to end (scripts/demo.sh
# is the main job, the store):
#
#   1. build (meson setup build-demo if it does not exist, then ninja);
#   2. start mooncake_http_metadata_server on a free port (--port 0);
#   3. start two te_node engines against it: a target with a 256 MiB buffer
#      and an initiator with room for the data twice (136 MiB by default);
#   4. fill 64 MiB of the initiator with pseudo-random bytes, WRITE them into
#      the target at an unaligned address, READ them back into another part
#      of the initiator, and compare XXH3 checksums of all three copies;
#   5. print sizes, checksums and the bandwidth of each direction, shut
#      everything down and exit 0 -- or non-zero on any failure or mismatch.
#
# te_node (tests/integration/te_node.c) is a small engine process that takes
# one command per line on stdin and answers one line on stdout; this script
# talks to each through a pair of FIFOs.
#
# Environment: MC_DEMO_BUILD (build dir, default <repo>/build-demo),
# MC_DEMO_SIZE_MIB (default 64), MC_LOG_LEVEL (engine log level, default warn).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${MC_DEMO_BUILD:-$ROOT/build-demo}
SIZE_MIB=${MC_DEMO_SIZE_MIB:-64}
SIZE=$((SIZE_MIB << 20))
INI_MIB=$((2 * SIZE_MIB + 8)) # the source and, after it, room for the read-back
TIMEOUT=120 # seconds allowed for any one step
export MC_LOG_LEVEL=${MC_LOG_LEVEL:-warn}
case $SIZE_MIB in
'' | *[!0-9]*) echo "demo: MC_DEMO_SIZE_MIB must be a number of MiB" >&2; exit 2 ;;
esac
if [ "$SIZE_MIB" -lt 1 ] || [ "$SIZE_MIB" -gt 240 ]; then
	echo "demo: MC_DEMO_SIZE_MIB must be 1..240 (the target has 256 MiB)" >&2
	exit 2
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/mooncake-demo.XXXXXX")
NODE_PIDS=()
NODE_VARS=(TGT INI)
# shellcheck source=scripts/demo_lib.sh
. "$ROOT/scripts/demo_lib.sh"
trap_cleanup

# --- 1. build ---------------------------------------------------------------
build_tree

SERVER=$BUILD/tools/mooncake_http_metadata_server
TE_NODE=$BUILD/tests/integration/te_node
[ -x "$SERVER" ] || die "$SERVER was not built"
[ -x "$TE_NODE" ] || die "$TE_NODE was not built (is -Dtests=false set on $BUILD?)"
NODE_BIN=$TE_NODE

# mbps BYTES MS
mbps() { awk -v b="$1" -v ms="$2" 'BEGIN { if (ms <= 0) ms = 0.001; printf "%.1f", b / 1e6 / (ms / 1000) }'; }
ms_of() { field "$1" ms; }

# --- 2. metadata server --------------------------------------------------------
mkfifo "$WORK/server.out"
"$SERVER" --host 127.0.0.1 --port 0 >"$WORK/server.out" 2>"$WORK/server.log" &
SERVER_PID=$!
NODE_PIDS+=("$SERVER_PID")
exec {SERVER_R}<"$WORK/server.out"
line=""
IFS= read -r -t "$TIMEOUT" -u "$SERVER_R" line || die "metadata server did not start"
case $line in
*"listening on "*) ;;
*) die "metadata server did not report its port: $line" ;;
esac
PORT=${line##*:}
META="http://127.0.0.1:$PORT/metadata"
say "== metadata server: $META (pid $SERVER_PID)"

# --- 3. engines ------------------------------------------------------------------
start_node TGT --metadata "$META" --name demo-target --host 127.0.0.1 --buffer 256m
start_node INI --metadata "$META" --name demo-initiator --host 127.0.0.1 --buffer "${INI_MIB}m"
TGT_ADDR=$(field "$TGT_INFO" addr)
# From here a dead te_node makes our writes fail (and die) instead of killing
# us; set only now so the children keep the default SIGPIPE action.
trap '' PIPE
say "== target    $(field "$TGT_INFO" name): 256 MiB at $TGT_ADDR, rpc port $(field "$TGT_INFO" rpc_port)"
say "== initiator $(field "$INI_INFO" name): $INI_MIB MiB at $(field "$INI_INFO" addr), rpc port $(field "$INI_INFO" rpc_port)"

cmd INI open demo-target
SEG=${REPLY#OK }
SEG=${SEG%% *}
cmd INI remote_base "$SEG"
say "   initiator opened demo-target: segment id $SEG, buffer ${REPLY#OK }"

# --- 4. data --------------------------------------------------------------------
SRC_OFF=3                       # unaligned on purpose
DST_OFF=$(((1 << 20) + 5))      # where the data lands in the target
BACK_OFF=$((SIZE + 4096 + 7))      # where the read-back lands in the initiator
REMOTE=$(printf '0x%x' $((TGT_ADDR + DST_OFF)))

say "== writing $SIZE_MIB MiB ($SIZE bytes) of random data"
cmd INI fill 20240601 "$SRC_OFF" "$SIZE"
cmd INI crc "$SRC_OFF" "$SIZE"
SRC_CRC=${REPLY#OK }
cmd TGT zero "$DST_OFF" "$SIZE"
cmd INI write "$SEG" "$SRC_OFF" "$REMOTE" "$SIZE"
W_MS=$(ms_of "$REPLY")
cmd TGT crc "$DST_OFF" "$SIZE"
DST_CRC=${REPLY#OK }

say "== reading it back"
cmd INI zero "$BACK_OFF" "$SIZE"
cmd INI read "$SEG" "$BACK_OFF" "$REMOTE" "$SIZE"
R_MS=$(ms_of "$REPLY")
cmd INI crc "$BACK_OFF" "$SIZE"
BACK_CRC=${REPLY#OK }

printf '\n%-34s %s\n' "source (initiator +$SRC_OFF)" "xxh3 $SRC_CRC"
printf '%-34s %s\n' "written copy (target +$DST_OFF)" "xxh3 $DST_CRC"
printf '%-34s %s\n' "read-back (initiator +$BACK_OFF)" "xxh3 $BACK_CRC"
printf '%-34s %8.1f ms  %8s MB/s\n' "write initiator -> target" "$W_MS" "$(mbps "$SIZE" "$W_MS")"
printf '%-34s %8.1f ms  %8s MB/s\n\n' "read  target -> initiator" "$R_MS" "$(mbps "$SIZE" "$R_MS")"

status=0
if [ "$SRC_CRC" != "$DST_CRC" ]; then
	say "MISMATCH: the target's copy differs from the source"
	status=1
fi
if [ "$SRC_CRC" != "$BACK_CRC" ]; then
	say "MISMATCH: the data read back differs from the source"
	status=1
fi

# --- 5. shut down -----------------------------------------------------------------
say "== shutting down"
quit_node INI
quit_node TGT
if [ "$status" -eq 0 ]; then
	say "demo: OK, $SIZE_MIB MiB written and read back, all checksums match"
else
	say "demo: FAILED, checksums differ"
fi
exit "$status"
