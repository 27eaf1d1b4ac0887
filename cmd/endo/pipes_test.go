package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Pipe transfers (tenants/pipes.c): a blocking write larger than the pipe writes whole, a
// non-blocking one what fits; reads return what is there; EPIPE; a write cut by a signal after
// part went returns the part, and so does sendfile. The same inside Endo as natively, on two
// vCPUs and on one.
func TestPipesMatchNative(t *testing.T) {
	want := native(t, "/bin/pipes")
	for _, line := range []string{
		"blocking write: 300000",
		"reader got 300000",
		"non-blocking write: 65536",
		"full pipe: EAGAIN",
		"short read: 10",
		"no reader: EPIPE",
		"interrupted write: 65536",
		"then, into a full pipe: EINTR",
		"interrupted sendfile: 65536",
	} {
		require.Contains(t, want.stdout, line+"\n")
	}
	require.Equal(t, want, endo(t, "/bin/pipes"))
	got := runCmd(t, "", endoBin, "run", "--cpus", "1", "--rootfs", rootfs, "--", "/bin/pipes")
	require.Equal(t, want, got)
	requireNoStubs(t)
}
