package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Links, modes, owners, times, fifos and file system statistics work as natively: what ln,
// chmod, chown, touch, mkfifo, df, free and sync call.
func TestFileAttributesMatchNative(t *testing.T) {
	want := native(t, "/bin/fileattrs")
	require.Equal(t, 0, want.code, want.stdout+want.stderr)
	require.Equal(t, 32, strings.Count(want.stdout, ": ok\n"), want.stdout)
	require.NotContains(t, want.stdout, "FAILED")
	require.Equal(t, want, endo(t, "/bin/fileattrs"))

	// busybox's own tools, which take these calls, on the sandbox's /proc/mounts for df.
	got := endo(t, "sh", "-c", `mkdir /fa-sh && cd /fa-sh && echo a > x && ln -s x l && chmod 600 x &&
		touch -d @0 x && stat -c '%a %Y' x && readlink l && df / | tail -1 | wc -w &&
		(dmesg >/dev/null 2>&1 || echo no dmesg); cd / && rm -r /fa-sh`)
	require.Equal(t, result{"600 0\nx\n6\nno dmesg\n", "", 0}, got)
	requireNoStubs(t)
}
