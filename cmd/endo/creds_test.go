package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A root entrypoint that drops to uid/gid 1000 (what gosu and su-exec do) gets Linux's rules
// for its ids, and the host's permission checks for its files: root's file is refused, what it
// creates is its own, chown, kill of root and setgroups are refused, there is no way back.
func TestDroppedCredentialsAreEnforced(t *testing.T) {
	want := native(t, "/bin/creds")
	require.Equal(t, 0, want.code, want.stdout+want.stderr)
	require.Equal(t, 14, strings.Count(want.stdout, ": ok\n"), want.stdout)
	require.Equal(t, want, endo(t, "/bin/creds"))
	requireNoStubs(t)
}

// A process started as another user (the OCI process user; endo run --user) runs as it from its
// first instruction: its ids, and the host's checks of its file accesses.
func TestProcessUserFromTheStart(t *testing.T) {
	secret := filepath.Join(rootfs, "rootonly")
	require.NoError(t, os.WriteFile(secret, []byte("secret\n"), 0o600))
	defer os.Remove(secret)
	got := runCmd(t, "", endoBin, "run", "--user", "1000:1001", "--rootfs", rootfs, "--", "sh", "-c",
		`id -u; id -g; grep '^Uid:' /proc/self/status; cat /rootonly || echo refused`)
	require.Equal(t, "1000\n1001\nUid:\t1000\t1000\t1000\t1000\nrefused\n", got.stdout, got.stderr)
	require.Contains(t, got.stderr, "Permission denied")
	require.Equal(t, "secret\n", endo(t, "cat", "/rootonly").stdout, "root still reads it")
	requireNoStubs(t)
}
