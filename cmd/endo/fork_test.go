package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The stub of an exited process serves later forks (it is emptied, not killed): a later child
// must find nothing of an earlier one's memory. Readers of an address only the writers mapped
// are killed by SIGSEGV, as natively.
func TestExitedChildLeavesNothingMapped(t *testing.T) {
	want := native(t, "/bin/recycle")
	require.Equal(t, strings.Repeat("writer: exit 0\n", 4)+strings.Repeat("reader: signal 11\n", 4), want.stdout)
	require.Equal(t, want, endo(t, "/bin/recycle"))
	requireNoStubs(t)
}
