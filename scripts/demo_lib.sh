# scripts/demo_lib.sh - what scripts/demo.sh and scripts/demo_te.sh share:
# messages, the build step and the line dialogue with a scriptable node
# process (store_node or te_node).  Sourced; expects ROOT, BUILD, WORK and
# TIMEOUT set, NODE_PIDS an array, and NODE_BIN the node program once built.
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
