package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Opening through /proc/self's magic links reaches the file itself, as on Linux: execve of
// /proc/self/exe (programs that run themselves again, busybox's applets among them), open of
// /proc/self/fd/N (bash's /dev/fd/N, "cat /proc/self/fd/0"), stat through them. And prctl: a
// thread's name, which comm shows, and the parent-death signal.
func TestProcSelfLinksAndPrctl(t *testing.T) {
	want := nativeWithProc(t, "/bin/procself")
	for _, line := range []string{
		"re-exec: through /proc/self/exe",
		"child status 0",
		`pipe reopened: 16 bytes "through the pipe"`,
		"own offset: yes, same bytes: yes",
		"stat through the link: same inode yes, size yes",
		`write end from the read end's link: "back"`,
		"directory reopened: yes",
		`name: "a-rather-long-t", comm: a-rather-long-t`,
		"child's name: a-rather-long-t",
		"parent-death signal: asked k, the pipe closed after 1 byte",
		"dumpable 1, no-new-privs 0",
	} {
		require.Contains(t, want.stdout, line+"\n")
	}
	require.Equal(t, want, endo(t, "/bin/procself"))
	requireNoStubs(t)
}
