package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// socketpair(AF_UNIX) works as natively: stream and datagram pairs between a process and its
// child, send/recv and sendmsg/recvmsg, a blocking receive woken by the peer, end of stream when
// the peer goes, options and names. (socket(2) itself is not served: no networking.)
func TestSocketpairMatchesNative(t *testing.T) {
	want := native(t, "/bin/sockpair")
	require.Equal(t, 0, want.code, want.stdout+want.stderr)
	require.Equal(t, 13, strings.Count(want.stdout, ": ok\n"), want.stdout)
	require.Equal(t, want, endo(t, "/bin/sockpair"))
	requireNoStubs(t)
}
