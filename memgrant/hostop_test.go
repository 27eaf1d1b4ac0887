package memgrant

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWithoutReplacedDropsOnlyUnmapsAMapReplaces(t *testing.T) {
	const p = PageSize
	unmap := func(addr, n uint64) HostOp { return HostOp{Kind: OpUnmap, Addr: addr, Length: n * p} }
	mapAt := func(addr, n uint64) HostOp { return HostOp{Kind: OpMap, Addr: addr, Length: n * p, Prot: ProtRead} }
	protect := func(addr, n uint64) HostOp {
		return HostOp{Kind: OpProtect, Addr: addr, Length: n * p, Prot: ProtRead}
	}

	// execve's batch, as traced: the unmaps inside the new data and stack go, the old heap stays.
	exec := []HostOp{
		unmap(0x4b7000, 4), unmap(0x4bb000, 9), unmap(0x4c4000, 34), unmap(0x7efefffe0000, 32),
		mapAt(0x4b7000, 13), mapAt(0x7efefffe0000, 32),
	}
	require.Equal(t, []HostOp{unmap(0x4c4000, 34), mapAt(0x4b7000, 13), mapAt(0x7efefffe0000, 32)},
		withoutReplaced(exec))

	for name, ops := range map[string][]HostOp{
		"covered in part":            {unmap(0x400000, 4), mapAt(0x401000, 4)},
		"touched before the map":     {unmap(0x400000, 4), protect(0x402000, 1), mapAt(0x400000, 4)},
		"mapped before, not after":   {mapAt(0x400000, 4), unmap(0x400000, 4)},
		"an unmap the map is beside": {unmap(0x400000, 4), mapAt(0x404000, 4)},
	} {
		require.Equal(t, ops, withoutReplaced(ops), name)
	}
}
