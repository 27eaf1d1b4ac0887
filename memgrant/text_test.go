package memgrant

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestPatchTextChangesSharedCodeOnly(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	src, err := x.g.NewPages(PageSize, pattern)
	require.NoError(t, err)
	defer src.Release()
	code, err := x.as.MapPages(0, PageSize, ProtRead|ProtExec, 0, "code", src)
	require.NoError(t, err)
	other, err := x.as.MapPages(0, PageSize, ProtRead|ProtExec, 0, "same code", src)
	require.NoError(t, err)

	// Seven bytes inside one 8-byte word, then seven that need the 16-byte store.
	for _, at := range []uint64{0x101, 0x206} {
		old := append([]byte(nil), x.local(t, code+at, 7)...)
		repl := []byte{0xff, 0x24, 0x25, 0x10, 0x20, 0x06, 0x00}
		require.NoError(t, x.as.PatchText(code+at, old, repl))
		require.Equal(t, repl, x.local(t, code+at, 7))
		require.Equal(t, repl, x.local(t, other+at, 7), "both mappings share the frame")
		require.Equal(t, patternAt(at-1), x.local(t, code, PageSize)[at-1], "the byte before stays")
		require.Equal(t, patternAt(at+7), x.local(t, code, PageSize)[at+7], "the byte after stays")
		err = x.as.PatchText(code+at, old, repl)
		require.True(t, errors.Is(err, unix.EAGAIN), "a second patch finds other bytes: %v", err)
	}

	err = x.as.PatchText(code+0x30c, make([]byte, 7), make([]byte, 7))
	require.True(t, errors.Is(err, unix.EINVAL), "bytes across a 16-byte block: %v", err)

	data, err := x.as.Map(0, PageSize, ProtRead|ProtWrite|ProtExec, 0, "jit", nil)
	require.NoError(t, err)
	err = x.as.PatchText(data+8, make([]byte, 7), []byte{1, 2, 3, 4, 5, 6, 7})
	require.True(t, errors.Is(err, unix.EPERM), "writable memory is not patched: %v", err)
	require.Equal(t, make([]byte, 7), x.local(t, data+8, 7))

	require.NoError(t, x.as.Unmap(data, PageSize))
	err = x.as.PatchText(data+8, make([]byte, 7), make([]byte, 7))
	require.True(t, errors.Is(err, unix.EFAULT), "unmapped: %v", err)
}
