# scripts/demo_lib.sh - what scripts/demo.sh and scripts/demo_te.sh share:
# messages, the build step and the line dialogue with a scriptable node
# process (store_node or te_node), and the clean-up.  Sourced; expects ROOT,
# BUILD, WORK and TIMEOUT set, NODE_PIDS an array, and NODE_BIN the node
# program once built; NODE_VARS names the nodes, MASTER_PID a master if any.
# shellcheck shell=bash

say() { printf '%s\n' "$*"; }
die() {
	printf 'demo: FAILED: %s\n' "$*" >&2
	for f in "$WORK"/*.log; do
		[ -s "$f" ] || continue
		printf -- '--- %s (last lines) ---\n' "$(basename "$f")" >&2
		tail -n 15 "$f" >&2
	done
	exit 1
}

# build_tree: configure BUILD if needed and build it, timing the step.
build_tree() {
	say "== building in $BUILD"
	local t0=$SECONDS
	if [ ! -f "$BUILD/build.ninja" ]; then
		meson setup "$BUILD" "$ROOT" >"$WORK/build.log" 2>&1 || die "meson setup failed"
	fi
	ninja -C "$BUILD" >>"$WORK/build.log" 2>&1 || die "ninja failed"
	rm -f "$WORK/build.log"
	say "   done in $((SECONDS - t0)) s"
}

# start_node VAR ARGS...: starts $NODE_BIN with FIFOs on stdin/stdout, stores
# the write fd in VAR_W, the read fd in VAR_R and the READY line in VAR_INFO.
start_node() {
	local var=$1 wfd rfd line
	shift
	mkfifo "$WORK/$var.in" "$WORK/$var.out"
	"$NODE_BIN" "$@" <"$WORK/$var.in" >"$WORK/$var.out" 2>"$WORK/$var.log" &
	NODE_PIDS+=($!)
	# Same order as the child's redirections: its stdin first, then stdout.
	exec {wfd}>"$WORK/$var.in"
	exec {rfd}<"$WORK/$var.out"
	printf -v "${var}_W" '%s' "$wfd"
	printf -v "${var}_R" '%s' "$rfd"
	IFS= read -r -t "$TIMEOUT" -u "$rfd" line || die "$var did not start"
	case $line in
	READY*) ;;
	*) die "$var did not start: $line" ;;
	esac
	printf -v "${var}_INFO" '%s' "$line"
}

# field "k1=v1 k2=v2" KEY -> value
field() {
	local kv
	for kv in $1; do
		case $kv in "$2"=*)
			printf '%s\n' "${kv#*=}"
			return
			;;
		esac
	done
}

# cmd VAR LINE: send one command, put the reply in REPLY; die on ERR.
cmd() {
	local var=$1 w r
	shift
	w=${var}_W
	r=${var}_R
	printf '%s\n' "$*" >&"${!w}" || die "$var: cannot send '$*'"
	IFS= read -r -t "$TIMEOUT" -u "${!r}" REPLY || die "$var: no reply to '$*'"
	case $REPLY in
	OK*) ;;
	*) die "$var: '$*' -> $REPLY" ;;
	esac
}

# quit_node VAR: ask the node to quit and wait for its stdout to reach EOF
# (the node frees what it holds and exits).
quit_node() {
	local var=$1 r=${1}_R rc=0 line
	cmd "$var" quit
	while [ "$rc" -eq 0 ]; do
		IFS= read -r -t "$TIMEOUT" -u "${!r}" line || rc=$?
	done
	if [ "$rc" -gt 128 ]; then
		die "$var did not exit after quit"
	fi
}

# demo_cleanup: the EXIT trap.  Nodes first (closing their stdin makes them
# quit), then the master; whatever is left after that gets SIGTERM.
# shellcheck disable=SC2317 # invoked by the EXIT trap
demo_cleanup() {
	local rc=$? pid var w fd
	trap - EXIT INT TERM
	for var in "${NODE_VARS[@]}"; do
		w=${var}_W
		fd=${!w:-}
		if [ -n "$fd" ]; then
			exec {fd}>&- 2>/dev/null || true
		fi
	done
	for pid in "${NODE_PIDS[@]}" ${MASTER_PID:-}; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${NODE_PIDS[@]}" ${MASTER_PID:-}; do
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$WORK"
	exit "$rc"
}

# trap_cleanup: run demo_cleanup on exit, interrupted or not.
trap_cleanup() {
	trap demo_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}
