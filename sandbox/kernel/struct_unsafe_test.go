package kernel

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestStructBytesIsTheABILayout(t *testing.T) {
	ts := unix.Timespec{Sec: 7, Nsec: 9}
	b := structBytes(&ts)
	require.Len(t, b, 16)
	require.Equal(t, uint64(7), binary.LittleEndian.Uint64(b))
	require.Equal(t, uint64(9), binary.LittleEndian.Uint64(b[8:]))
	b[0] = 8 // the same memory, not a copy
	require.Equal(t, int64(8), ts.Sec)
	var st unix.Statfs_t
	require.Len(t, structBytes(&st), 120, "struct statfs on amd64")
}
