#!/usr/bin/env bash
# tools.sh CACHE_DIR — installs what the integration tests and `make demo` need:
#   apt: busybox-static (image contents), runc (comparison runtime)
#   CACHE_DIR/bin: containerd, ctr, containerd-shim-runc-v2 (containerd v2.4.2), nerdctl v2.0.5
# Idempotent: each tool has a stamp under CACHE_DIR/stamps naming its version, so a rerun
# with everything in place only checks stamps and returns at once.
set -euo pipefail

if [ $# -ne 1 ]; then
	echo "usage: $0 CACHE_DIR" >&2
	exit 2
fi
mkdir -p "$1/bin" "$1/stamps"
CACHE=$(cd "$1" && pwd)
BIN=$CACHE/bin
STAMPS=$CACHE/stamps

CONTAINERD_VERSION=v2.4.2
NERDCTL_VERSION=v2.0.5
GO_VERSION=$(go env GOVERSION)

# fresh NAME VERSION: true when NAME's stamp says VERSION (built with this Go) and its binaries exist.
fresh() {
	local name=$1 want="$2 $GO_VERSION"
	shift 2
	[ -f "$STAMPS/$name" ] && [ "$(cat "$STAMPS/$name")" = "$want" ] || return 1
	local b
	for b in "$@"; do
		[ -x "$BIN/$b" ] || return 1
	done
}

stamp() {
	echo "$2 $GO_VERSION" >"$STAMPS/$1"
}

# Debian packages. `apt-get update` only when something is missing and the lists do not know it.
apt_pkgs=(busybox-static runc)
missing=()
for p in "${apt_pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -gt 0 ]; then
	start=$SECONDS
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y --no-install-recommends "${missing[@]}" >"$CACHE/apt.log" 2>&1; then
		apt-get update >>"$CACHE/apt.log" 2>&1
		apt-get install -y --no-install-recommends "${missing[@]}" >>"$CACHE/apt.log" 2>&1 ||
			{ echo "tools: apt-get install ${missing[*]} failed, see $CACHE/apt.log" >&2; exit 1; }
	fi
	echo "tools: apt ${missing[*]} installed ($((SECONDS - start))s)"
fi

# containerd, ctr and the runc shim, from the containerd module at a fixed version.
if ! fresh containerd "$CONTAINERD_VERSION" containerd ctr containerd-shim-runc-v2; then
	start=$SECONDS
	for cmd in containerd ctr containerd-shim-runc-v2; do
		GOBIN=$BIN GOFLAGS=-buildvcs=false go install \
			"github.com/containerd/containerd/v2/cmd/$cmd@$CONTAINERD_VERSION"
	done
	stamp containerd "$CONTAINERD_VERSION"
	echo "tools: containerd, ctr, containerd-shim-runc-v2 $CONTAINERD_VERSION built ($((SECONDS - start))s)"
fi

# nerdctl: `go install nerdctl@version` refuses its go.mod (replace directives), so build it
# from a small wrapper module that requires it.
if ! fresh nerdctl "$NERDCTL_VERSION" nerdctl; then
	start=$SECONDS
	mod=$CACHE/nerdctl-wrapper
	rm -rf "$mod"
	mkdir -p "$mod"
	cat >"$mod/go.mod" <<MOD
module endo.test/nerdctl-wrapper

go 1.24
MOD
	cat >"$mod/tools.go" <<'GO'
//go:build tools

// Package tools pins nerdctl for `go install` from this wrapper module.
package tools

import _ "github.com/containerd/nerdctl/v2/cmd/nerdctl"
GO
	(
		cd "$mod"
		export GONOSUMDB=github.com/containerd/nerdctl GOFLAGS="-mod=mod -buildvcs=false"
		go get "github.com/containerd/nerdctl/v2@$NERDCTL_VERSION" >"$mod/get.log" 2>&1 ||
			{ cat "$mod/get.log" >&2; exit 1; }
		GOBIN=$BIN go install github.com/containerd/nerdctl/v2/cmd/nerdctl
	)
	stamp nerdctl "$NERDCTL_VERSION"
	echo "tools: nerdctl $NERDCTL_VERSION built ($((SECONDS - start))s)"
fi
