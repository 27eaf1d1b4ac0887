package crossing

import (
	"fmt"
	"time"

	"github.com/endovisor/endo/memgrant"
	"golang.org/x/sys/unix"
)

// Services is the service table between the kernel proper and the endovisor core: the only way
// the kernel proper changes or reads tenant memory. Each entry checks its arguments (ranges within
// the tenant part of an address space, no wrap-around, a live address space) before the core
// (memgrant, which checks frame ownership and rights) does the work.
type Services struct {
	Noop        func(x uint64) uint64
	Map         func(as *memgrant.AddressSpace, addr, length uint64, prot memgrant.Prot, flags memgrant.MapFlags, name string, fill memgrant.FillFunc) (uint64, error)
	MapPages    func(as *memgrant.AddressSpace, addr, length uint64, prot memgrant.Prot, flags memgrant.MapFlags, name string, src *memgrant.Pages) (uint64, error)
	Unmap       func(as *memgrant.AddressSpace, addr, length uint64) error
	Protect     func(as *memgrant.AddressSpace, addr, length uint64, prot memgrant.Prot) error
	HandleFault func(as *memgrant.AddressSpace, addr uint64, write bool) (bool, error)
	CopyIn      func(as *memgrant.AddressSpace, dst []byte, addr uint64) error
	CopyOut     func(as *memgrant.AddressSpace, addr uint64, src []byte) error
	Slices      func(as *memgrant.AddressSpace, addr, length uint64, write bool) ([][]byte, error)
	ReadString  func(as *memgrant.AddressSpace, addr uint64, max int) (string, error)
	PatchText   func(as *memgrant.AddressSpace, addr uint64, old, new []byte) error
}

// noop is the service timed at start: what the table itself costs.
//
//go:noinline
func noop(x uint64) uint64 { return x + 1 }

// checkRange refuses ranges that wrap or leave the tenant part of the address space.
func checkRange(as *memgrant.AddressSpace, addr, length uint64) error {
	if as == nil {
		return fmt.Errorf("service: no address space: %w", unix.EFAULT)
	}
	if addr+length < addr || addr+length > TenantMax {
		return fmt.Errorf("service: range %#x+%#x outside the tenant: %w", addr, length, unix.EFAULT)
	}
	return nil
}

// checkMap refuses a mapping that is empty, wraps, or is placed beyond the tenant's part.
func checkMap(as *memgrant.AddressSpace, addr, length uint64, flags memgrant.MapFlags) error {
	if as == nil || length == 0 || length > TenantMax || addr+length < addr {
		return fmt.Errorf("service map %#x+%#x: %w", addr, length, unix.EINVAL)
	}
	if flags&(memgrant.MapFixed|memgrant.MapFixedNoReplace) != 0 && addr+length > TenantMax {
		return fmt.Errorf("service map %#x+%#x: beyond the tenant: %w", addr, length, unix.ENOMEM)
	}
	return nil
}

// NewServices builds the table over memgrant.
func NewServices() *Services {
	return &Services{
		Noop: func(x uint64) uint64 { return noop(x) },
		Map: func(as *memgrant.AddressSpace, addr, length uint64, prot memgrant.Prot, flags memgrant.MapFlags, name string, fill memgrant.FillFunc) (uint64, error) {
			if err := checkMap(as, addr, length, flags); err != nil {
				return 0, err
			}
			return as.Map(addr, length, prot, flags, name, fill)
		},
		MapPages: func(as *memgrant.AddressSpace, addr, length uint64, prot memgrant.Prot, flags memgrant.MapFlags, name string, src *memgrant.Pages) (uint64, error) {
			if err := checkMap(as, addr, length, flags); err != nil {
				return 0, err
			}
			if src == nil {
				return 0, fmt.Errorf("service map pages %#x+%#x: no pages: %w", addr, length, unix.EINVAL)
			}
			return as.MapPages(addr, length, prot, flags, name, src)
		},
		Unmap: func(as *memgrant.AddressSpace, addr, length uint64) error {
			if as == nil || addr+length < addr {
				return fmt.Errorf("service unmap %#x+%#x: %w", addr, length, unix.EINVAL)
			}
			return as.Unmap(addr, length)
		},
		Protect: func(as *memgrant.AddressSpace, addr, length uint64, prot memgrant.Prot) error {
			if err := checkRange(as, addr, length); err != nil {
				return fmt.Errorf("service protect: %w", err)
			}
			return as.Protect(addr, length, prot)
		},
		HandleFault: func(as *memgrant.AddressSpace, addr uint64, write bool) (bool, error) {
			if as == nil || addr >= TenantMax {
				return false, nil
			}
			return as.HandleFault(addr, write)
		},
		CopyIn: func(as *memgrant.AddressSpace, dst []byte, addr uint64) error {
			if err := checkRange(as, addr, uint64(len(dst))); err != nil {
				return err
			}
			return as.CopyIn(dst, addr)
		},
		CopyOut: func(as *memgrant.AddressSpace, addr uint64, src []byte) error {
			if err := checkRange(as, addr, uint64(len(src))); err != nil {
				return err
			}
			return as.CopyOut(addr, src)
		},
		Slices: func(as *memgrant.AddressSpace, addr, length uint64, write bool) ([][]byte, error) {
			if err := checkRange(as, addr, length); err != nil {
				return nil, err
			}
			return as.Slices(addr, length, write)
		},
		ReadString: func(as *memgrant.AddressSpace, addr uint64, max int) (string, error) {
			if err := checkRange(as, addr, 1); err != nil {
				return "", err
			}
			return as.ReadString(addr, max)
		},
		PatchText: func(as *memgrant.AddressSpace, addr uint64, old, new []byte) error {
			if err := checkRange(as, addr, uint64(len(old))); err != nil {
				return err
			}
			return as.PatchText(addr, old, new)
		},
	}
}

// ServiceTiming is what a no-op costs called directly and through the table.
type ServiceTiming struct {
	Direct, Table time.Duration // per call, the cheapest of seven rounds
}

func (t ServiceTiming) String() string {
	return fmt.Sprintf("service table no-op: direct %.1f ns, through the table %.1f ns (+%.1f ns)",
		float64(t.Direct.Nanoseconds())/serviceCalls, float64(t.Table.Nanoseconds())/serviceCalls,
		float64(t.Table.Nanoseconds()-t.Direct.Nanoseconds())/serviceCalls)
}

const serviceCalls = 10000

// TimeNoop times serviceCalls no-op calls directly and through the table, seven rounds each,
// and keeps the cheapest round of each (Direct and Table hold the round's total).
func (s *Services) TimeNoop() ServiceTiming {
	best := ServiceTiming{Direct: time.Hour, Table: time.Hour}
	var sink uint64
	for round := 0; round < 7; round++ {
		t0 := time.Now()
		for i := uint64(0); i < serviceCalls; i++ {
			sink = noop(sink)
		}
		t1 := time.Now()
		for i := uint64(0); i < serviceCalls; i++ {
			sink = s.Noop(sink)
		}
		t2 := time.Now()
		best.Direct = min(best.Direct, t1.Sub(t0))
		best.Table = min(best.Table, t2.Sub(t1))
	}
	if sink == 0 {
		panic("unreachable: the no-op counts")
	}
	return best
}
