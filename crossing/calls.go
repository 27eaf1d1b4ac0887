package crossing

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Calls is a sandbox's table of patched call sites. A site "mov $nr, %eax; syscall" in tenant code
// that has trapped once is rewritten into a jump through the table to a snippet that enters the
// stub's stub_call with the number and the return address while the tenant has one thread (see
// Stub.SetSingle): the call then reaches the sandbox without a signal and returns without a
// sigreturn. With more threads the snippet makes the call itself and traps. Every stub of the sandbox maps the table at
// the same place, read-only, because patched code is shared between processes that map the same
// program at the same address (the page cache). Entries are never taken back: the table is as
// old as the sandbox.
type Calls struct {
	file *os.File
	mem  []byte

	mu    sync.Mutex
	sites map[callSite]int
	nrs   []uint32 // the number of each entry
	rets  []uint64 // the return address of each entry
}

type callSite struct {
	ret uint64
	nr  uint32
}

// SiteLen is the length of a patched site and of the code it replaces.
const SiteLen = 7

// NewCalls makes an empty table.
func NewCalls() (*Calls, error) {
	if err := loadStubImage(); err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("endo-calls", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("call table memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "endo-calls")
	if err := unix.Ftruncate(fd, callsSize); err != nil {
		f.Close()
		return nil, fmt.Errorf("call table size: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, callsSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("call table map: %w", err)
	}
	return &Calls{file: f, mem: mem, sites: make(map[callSite]int)}, nil
}

// Close unmaps the table; stubs that map it keep their mappings.
func (c *Calls) Close() error {
	if c == nil || c.mem == nil {
		return nil
	}
	unix.Munmap(c.mem)
	c.mem = nil
	return c.file.Close()
}

// Len is the number of entries in use.
func (c *Calls) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.nrs)
}

// Unpatched reports whether code (the SiteLen bytes at addr) is "mov $nr, %eax; syscall" that
// can be patched: before is the byte in front of it, which must not make the mov's opcode byte
// part of a longer instruction (a REX or other prefix, or the 0x0f escape).
func Unpatched(before byte, code []byte, nr uint64) bool {
	if len(code) != SiteLen || code[0] != 0xb8 || code[5] != 0x0f || code[6] != 0x05 {
		return false
	}
	if uint64(binary.LittleEndian.Uint32(code[1:5])) != nr {
		return false
	}
	switch {
	case before >= 0x40 && before <= 0x4f, before == 0x0f, before == 0x66, before == 0x67,
		before == 0xf2, before == 0xf3, before == 0xc4, before == 0xc5, before == 0x62, before == 0x8f:
		return false
	}
	return true
}

// Site returns the bytes that replace the call site whose syscall instruction ends at ret,
// making an entry for it if there is none yet. It fails when the table is full.
func (c *Calls) Site(ret uint64, nr uint32) ([SiteLen]byte, error) {
	var code [SiteLen]byte
	c.mu.Lock()
	defer c.mu.Unlock()
	i, ok := c.sites[callSite{ret, nr}]
	if !ok {
		if len(c.nrs) == callsMax {
			return code, fmt.Errorf("call table full (%d sites)", callsMax)
		}
		i = len(c.nrs)
		c.writeSnippet(i, ret, nr)
		c.sites[callSite{ret, nr}] = i
		c.nrs = append(c.nrs, nr)
		c.rets = append(c.rets, ret)
	}
	code[0], code[1], code[2] = 0xff, 0x24, 0x25 // jmp *disp32, absolute
	binary.LittleEndian.PutUint32(code[3:], uint32(callsBase+8*i))
	return code, nil
}

// writeSnippet fills entry i: the snippet, then the table's pointer to it (which makes it live).
func (c *Calls) writeSnippet(i int, ret uint64, nr uint32) {
	sn := c.mem[callsSnippets+callsSnippet*i:][:callsSnippet]
	sn[0], sn[1], sn[2] = 0xf6, 0x04, 0x25 // testb $1, CALLS_CMD+CMD_SINGLE
	binary.LittleEndian.PutUint32(sn[3:], callsCmd+cmdSingle)
	sn[7] = 1
	sn[8], sn[9] = 0x75, snippetTrap-10 // jne over the trapping call
	sn[10] = 0xb8                       // mov $nr, %eax
	binary.LittleEndian.PutUint32(sn[11:], nr)
	sn[15], sn[16] = 0x0f, 0x05 // syscall: outside the allowed range, it traps
	sn[17], sn[18] = 0x48, 0xb9 // movabs $ret, %rcx
	binary.LittleEndian.PutUint64(sn[19:], ret)
	sn[27] = 0xb8 // mov $nr, %eax
	binary.LittleEndian.PutUint32(sn[28:], nr)
	sn[32], sn[33] = 0xff, 0x25 // jmp *0(%rip)
	binary.LittleEndian.PutUint32(sn[34:], 0)
	binary.LittleEndian.PutUint64(sn[38:], stubImage.call)
	binary.LittleEndian.PutUint64(c.mem[8*i:], callsBase+callsSnippets+uint64(callsSnippet*i))
}

// Trapped maps the address after a syscall instruction, as a trap reports it, to the address
// the tenant's call returns to: a snippet's own call (made while the tenant has several
// threads) returns to its site's.
func (c *Calls) Trapped(addr uint64) uint64 {
	const lo = callsBase + callsSnippets
	if c == nil || addr < lo || addr >= lo+callsMax*callsSnippet || (addr-lo)%callsSnippet != snippetTrap {
		return addr
	}
	i := int((addr - lo) / callsSnippet)
	c.mu.Lock()
	defer c.mu.Unlock()
	if i >= len(c.rets) {
		return addr
	}
	return c.rets[i]
}

// Patched decodes a patched site: code holds the SiteLen bytes at the site, whose call returns
// to ret. It returns the call's number if they are a jump to an entry made for that site.
func (c *Calls) Patched(code []byte, ret uint64) (uint32, bool) {
	if c == nil || len(code) != SiteLen || code[0] != 0xff || code[1] != 0x24 || code[2] != 0x25 {
		return 0, false
	}
	at := uint64(binary.LittleEndian.Uint32(code[3:]))
	if at < callsBase || at >= callsBase+8*callsMax || (at-callsBase)%8 != 0 {
		return 0, false
	}
	i := int((at - callsBase) / 8)
	c.mu.Lock()
	defer c.mu.Unlock()
	if i >= len(c.nrs) || c.rets[i] != ret {
		return 0, false
	}
	return c.nrs[i], true
}

// EscalateAddr is where the sandbox resumes a thread stopped at a patched call when it needs the
// thread's full state: the instruction there faults (SIGILL), and that trap has it all.
func EscalateAddr() uint64 { return stubImage.escalate }
