package main

import (
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
