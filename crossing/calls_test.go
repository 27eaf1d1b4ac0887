package crossing

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCallSitesEncodeAndDecode(t *testing.T) {
	c, err := NewCalls()
	require.NoError(t, err)
	defer c.Close()

	site := []byte{0xb8, 0x27, 0, 0, 0, 0x0f, 0x05} // mov $39, %eax; syscall
	require.True(t, Unpatched(0xc3, site, 39))
	require.False(t, Unpatched(0xc3, site, 40), "another number in rax")
	require.False(t, Unpatched(0x41, site, 39), "b8 after a REX prefix is mov to r8d")
	require.False(t, Unpatched(0x0f, site, 39), "0f b8 is another instruction")

	const ret = 0x401007
	code, err := c.Site(ret, 39)
	require.NoError(t, err)
	require.Equal(t, []byte{0xff, 0x24, 0x25}, code[:3], "jmp through the table")
	require.Equal(t, byte(0x06), code[5], "the old syscall's first byte becomes an invalid instruction")
	again, err := c.Site(ret, 39)
	require.NoError(t, err)
	require.Equal(t, code, again, "one entry per site")
	other, err := c.Site(ret+0x100, 39)
	require.NoError(t, err)
	require.NotEqual(t, code, other)
	require.Equal(t, 2, c.Len())

	nr, ok := c.Patched(code[:], ret)
	require.True(t, ok)
	require.Equal(t, uint32(39), nr)
	_, ok = c.Patched(code[:], ret+0x100)
	require.False(t, ok, "an entry made for another site")
	_, ok = c.Patched(site, ret)
	require.False(t, ok)

	// The entry points at its snippet, whose own trapping call maps back to the site.
	entry := binary.LittleEndian.Uint32(code[3:])
	snippet := binary.LittleEndian.Uint64(c.mem[entry-callsBase:])
	require.Equal(t, uint64(ret), c.Trapped(snippet+snippetTrap))
	require.Equal(t, uint64(snippet+snippetTrap+1), c.Trapped(snippet+snippetTrap+1))
	require.Equal(t, uint64(ret), c.Trapped(ret), "other addresses are themselves")
	sn := c.mem[snippet-callsBase:][:callsSnippet]
	require.Equal(t, []byte{0xb8, 0x27, 0, 0, 0, 0x0f, 0x05}, sn[10:17], "the trapping call")
	require.Equal(t, uint64(ret), binary.LittleEndian.Uint64(sn[19:]), "rcx: the return address")
	require.Equal(t, stubImage.call, binary.LittleEndian.Uint64(sn[38:]), "then stub_call")
}
