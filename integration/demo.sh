#!/usr/bin/env bash
# demo.sh — what `make demo` runs after `make build`: a private containerd (the harness' config,
# integration/harness/containerd.toml.tmpl), the busybox test image, and
#   ctr run --rm --runtime $RUNTIME docker.io/endo/busybox:test demo echo hello from endo
# Everything lives under a fresh /run/endo-demo-XXXXXX and is removed on exit, however it exits.
#
# Env: RUNTIME (default io.containerd.endo.v1; io.containerd.runc.v2 to try the demo on runc),
#      ENDO_TOOLS (tools cache dir for integration/tools.sh, default <repo>/.cache).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
TOOLS=${ENDO_TOOLS:-$REPO/.cache}
RUNTIME=${RUNTIME:-io.containerd.endo.v1}
IMAGE=docker.io/endo/busybox:test
NS=endo-demo
ID=demo

"$REPO/integration/tools.sh" "$TOOLS"
TBIN=$TOOLS/bin
if [ "$RUNTIME" = io.containerd.endo.v1 ]; then
	for b in endo containerd-shim-endo-v1; do
		if [ ! -x "$REPO/.cache/bin/$b" ]; then
			echo "demo: $REPO/.cache/bin/$b missing: run \`make build\`" >&2
			exit 1
		fi
	done
fi

mkdir -p "$REPO/.cache/images"
TAR=$REPO/.cache/images/busybox-test.tar
(cd "$REPO" && go run ./integration/image/cmd/mkimage -o "$TAR")

DIR=$(mktemp -d /run/endo-demo-XXXXXX)
CPID=
ctr() { "$TBIN/ctr" --address "$DIR/c.sock" --namespace "$NS" "$@"; }

cleanup() {
	local rc=$?
	set +e
	if [ -n "$CPID" ] && kill -0 "$CPID" 2>/dev/null; then
		if ctr tasks ls -q 2>/dev/null | grep -qx "$ID"; then
			ctr tasks kill --all --signal SIGKILL "$ID" >/dev/null 2>&1
			ctr tasks rm --force "$ID" >/dev/null 2>&1
		fi
		ctr containers rm "$ID" >/dev/null 2>&1
		kill -TERM "$CPID"
		for _ in $(seq 200); do kill -0 "$CPID" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$CPID" 2>/dev/null
		wait "$CPID" 2>/dev/null
	fi
	# Shims that outlived containerd name the private dir in their arguments.
	for p in /proc/[0-9]*; do
		cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
		case $cmd in
		*"$DIR/"*)
			echo "demo: killing leftover process ${p#/proc/}: $cmd" >&2
			kill -KILL "${p#/proc/}" 2>/dev/null
			;;
		esac
	done
	# Unmount anything left under the private dir, deepest first.
	awk -v d="$DIR" '$5 == d || index($5, d "/") == 1 { print length($5), $5 }' /proc/self/mountinfo |
		sort -rn | cut -d' ' -f2- | while read -r m; do
		echo "demo: unmounting leftover $m" >&2
		umount -l "$m"
	done
	if [ $rc -ne 0 ] && [ -f "$DIR/containerd.log" ]; then
		echo "demo: containerd log (last 30 lines):" >&2
		tail -n 30 "$DIR/containerd.log" >&2
	fi
	rm -rf "$DIR"
	rmdir "/run/containerd/runc/$NS" 2>/dev/null
	awk '$9 == "cgroup" || $9 == "cgroup2" { print $5 }' /proc/self/mountinfo | while read -r cg; do
		rmdir "$cg/$NS" 2>/dev/null
	done
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

sed "s|@DIR@|$DIR|g" "$REPO/integration/harness/containerd.toml.tmpl" >"$DIR/config.toml"
mkdir -p "$DIR/s" "$DIR/tmp" "$DIR/cni/net.d" "$DIR/fifo"
PATH="$REPO/.cache/bin:$TBIN:$PATH" "$TBIN/containerd" --config "$DIR/config.toml" >"$DIR/containerd.log" 2>&1 &
CPID=$!
for _ in $(seq 300); do
	ctr version >/dev/null 2>&1 && break
	kill -0 "$CPID" 2>/dev/null || { echo "demo: containerd exited at start" >&2; exit 1; }
	sleep 0.1
done
ctr version >/dev/null 2>&1 || { echo "demo: containerd did not come up in 30s" >&2; exit 1; }
echo "demo: containerd $("$TBIN/containerd" --version | awk '{print $3}') up at $DIR/c.sock"

# ctr warns about cgroup v1 on every call; keep its stderr for failures only.
ctr images import "$TAR" >/dev/null 2>"$DIR/ctr.err" || { cat "$DIR/ctr.err" >&2; exit 1; }
echo "demo: imported $IMAGE"

echo "demo: ctr run --rm --runtime $RUNTIME $IMAGE $ID echo hello from endo"
set +e
out=$(ctr run --rm --fifo-dir "$DIR/fifo" --runtime "$RUNTIME" "$IMAGE" "$ID" echo hello from endo 2>"$DIR/ctr.err")
status=$?
set -e
printf '%s\n' "$out"
if [ $status -ne 0 ]; then
	grep -v 'DEPRECATION: The support for cgroup v1' "$DIR/ctr.err" >&2
	echo "demo: FAILED (exit $status)" >&2
	exit $status
fi
echo "demo: OK"
