package kernel

import (
	"crypto/rand"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/endovisor/endo/crossing"
	"github.com/endovisor/endo/memgrant"
	"github.com/endovisor/endo/sandbox/kernel/vfs"
	"golang.org/x/sys/unix"
)

const (
	minAddr     = 0x10000        // like vm.mmap_min_addr
	pieBase     = 0x555555554000 // where Linux puts a position-independent main program
	stackSize   = 8 << 20        // the default RLIMIT_STACK
	stackEager  = 128 << 10      // the part of the stack populated at exec
	maxArgBytes = 2 << 20        // argv and envp together, like ARG_MAX
	defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// image is an executable checked and ready to be mapped.
type image struct {
	path   string // as execve was given it: AT_EXECFN, and the new comm
	name   string // the file itself (symlinks resolved), for the mappings and /proc/<pid>/exe
	file   *vfs.File
	elf    *elf.File
	phoff  uint64 // file offset of the program headers (debug/elf does not keep it)
	interp *image
	argv   []string // the arguments the program gets (scripts add their interpreter's)
}

func (img *image) close() {
	if img == nil {
		return
	}
	img.file.DecRef()
	img.interp.close()
}

// fileReader lets debug/elf read a tenant file through the vfs.
type fileReader struct{ f *vfs.File }

func (r fileReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.f.Pread(p, off)
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return n, err
}

func newContainerFS(spec ProcessSpec) (*vfs.FS, error) {
	mounts := make([]vfs.Mount, 0, len(spec.Mounts))
	for _, m := range spec.Mounts {
		mounts = append(mounts, vfs.Mount{Dest: m.Dest, Source: m.Source, ReadOnly: m.ReadOnly})
	}
	fs, err := vfs.New(spec.Rootfs, mounts)
	if err != nil {
		return nil, err
	}
	return fs, nil
}

// findProgram resolves a program name against PATH, as execvp would.
func findProgram(fs *vfs.FS, cwd, name string, env []string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("empty program name: %w", unix.ENOENT)
	}
	if strings.Contains(name, "/") {
		return name, nil
	}
	search := defaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			search = v
		}
	}
	for _, dir := range strings.Split(search, ":") {
		if dir == "" {
			dir = "."
		}
		cand := path.Join(dir, name)
		st, err := fs.Stat(cwd, cand, true)
		if err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o111 != 0 {
			return cand, nil
		}
	}
	return "", fmt.Errorf("%s: executable file not found in $PATH: %w", name, unix.ENOENT)
}

// openImage opens and checks an executable (and its ELF interpreter) before anything is mapped.
// A script ("#!") is run by its interpreter, with argv as execve(2) builds it.
func openImage(fs *vfs.FS, cwd, p string, argv []string) (*image, error) {
	for scripts := 0; ; scripts++ {
		f, err := fs.Open(cwd, p, unix.O_RDONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		var head [256]byte
		n, _ := f.Pread(head[:], 0)
		if n < 2 || head[0] != '#' || head[1] != '!' {
			img, err := openELF(fs, cwd, f, p, 0)
			if err != nil {
				return nil, err
			}
			img.argv = argv
			return img, nil
		}
		f.DecRef()
		if scripts >= 4 {
			return nil, fmt.Errorf("%s: too many levels of interpreters: %w", p, unix.ELOOP)
		}
		line, _, _ := strings.Cut(string(head[2:n]), "\n")
		interp, arg, _ := strings.Cut(strings.TrimSpace(line), " ")
		if interp == "" {
			return nil, fmt.Errorf("%s: empty #! line: %w", p, unix.ENOEXEC)
		}
		next := []string{interp}
		if arg = strings.TrimSpace(arg); arg != "" {
			next = append(next, arg)
		}
		next = append(next, p)
		if len(argv) > 1 {
			next = append(next, argv[1:]...)
		}
		p, argv = interp, next
	}
}

// openELF checks an open ELF file (and opens its interpreter); it takes over f's reference.
func openELF(fs *vfs.FS, cwd string, f *vfs.File, p string, depth int) (*image, error) {
	img := &image{path: p, name: f.CanonicalPath(), file: f}
	if img.name == "" {
		img.name = p
	}
	fail := func(err error) (*image, error) {
		img.close()
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		return fail(fmt.Errorf("%s: %w", p, err))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o111 == 0 {
		return fail(fmt.Errorf("%s: not an executable file: %w", p, unix.EACCES))
	}
	ef, err := elf.NewFile(fileReader{f})
	if err != nil {
		return fail(fmt.Errorf("%s: not a valid ELF executable (%v): %w", p, err, unix.ENOEXEC))
	}
	img.elf = ef
	var hdr [8]byte
	if _, err := f.Pread(hdr[:], 32); err != nil { // e_phoff
		return fail(fmt.Errorf("%s: read ELF header: %w", p, unix.ENOEXEC))
	}
	img.phoff = binary.LittleEndian.Uint64(hdr[:])
	if err := checkELF(ef, st.Size); err != nil {
		return fail(fmt.Errorf("%s: %v: %w", p, err, unix.ENOEXEC))
	}
	for _, ph := range ef.Progs {
		if ph.Type != elf.PT_INTERP {
			continue
		}
		if depth > 0 {
			return fail(fmt.Errorf("%s: an ELF interpreter may not have one itself: %w", p, unix.ELIBBAD))
		}
		if ph.Filesz == 0 || ph.Filesz > unix.PathMax {
			return fail(fmt.Errorf("%s: bad PT_INTERP: %w", p, unix.ENOEXEC))
		}
		buf := make([]byte, ph.Filesz)
		if _, err := ph.ReadAt(buf, 0); err != nil {
			return fail(fmt.Errorf("%s: read PT_INTERP: %w", p, unix.ENOEXEC))
		}
		name := strings.TrimRight(string(buf), "\x00")
		inf, err := fs.Open(cwd, name, unix.O_RDONLY, 0)
		if err != nil {
			return fail(fmt.Errorf("%s: interpreter %s: %w", p, name, err))
		}
		if img.interp, err = openELF(fs, cwd, inf, name, depth+1); err != nil {
			return fail(fmt.Errorf("%s: interpreter: %w", p, err))
		}
	}
	return img, nil
}

// checkELF refuses what Linux would refuse, and what would make the loader misbehave.
func checkELF(ef *elf.File, size int64) error {
	if ef.Class != elf.ELFCLASS64 || ef.Machine != elf.EM_X86_64 {
		return fmt.Errorf("not an x86-64 ELF64 file (%v, %v)", ef.Class, ef.Machine)
	}
	if ef.Type != elf.ET_EXEC && ef.Type != elf.ET_DYN {
		return fmt.Errorf("ELF type %v is not executable", ef.Type)
	}
	loads := 0
	for _, ph := range ef.Progs {
		if ph.Type != elf.PT_LOAD {
			continue
		}
		loads++
		if ph.Memsz < ph.Filesz {
			return errors.New("a PT_LOAD segment has memsz < filesz")
		}
		if ph.Off%memgrant.PageSize != ph.Vaddr%memgrant.PageSize {
			return errors.New("a PT_LOAD segment's offset and address are not congruent")
		}
		if ph.Off+ph.Filesz < ph.Off || ph.Off+ph.Filesz > uint64(size) {
			return errors.New("a PT_LOAD segment lies beyond the end of the file")
		}
		if ph.Vaddr+ph.Memsz < ph.Vaddr || ph.Vaddr+ph.Memsz > crossing.TenantMax/2 {
			return errors.New("a PT_LOAD segment lies outside the address space")
		}
	}
	if loads == 0 {
		return errors.New("no PT_LOAD segment")
	}
	return nil
}

// span is the page-aligned extent of an image's PT_LOAD segments.
func span(ef *elf.File) (lo, hi uint64) {
	lo = ^uint64(0)
	for _, ph := range ef.Progs {
		if ph.Type == elf.PT_LOAD {
			lo = min(lo, pageDown(ph.Vaddr))
			hi = max(hi, pageUp(ph.Vaddr+ph.Memsz))
		}
	}
	return lo, hi
}

func pageDown(x uint64) uint64 { return x &^ (memgrant.PageSize - 1) }
func pageUp(x uint64) uint64   { return (x + memgrant.PageSize - 1) &^ (memgrant.PageSize - 1) }

// loaded is where an image ended up.
type loaded struct {
	base, entry, phdr, end uint64
}

// mapImage maps an image's segments as private copies of the file; position-independent
// images go at hint (0: anywhere).
func (p *Process) mapImage(img *image, hint uint64) (loaded, error) {
	ef := img.elf
	lo, hi := span(ef)
	var base uint64
	if ef.Type == elf.ET_DYN {
		// Reserve the whole extent first, so that the segments keep their distances.
		at, err := p.k.svc.Map(p.as, hint, hi-lo, memgrant.ProtNone, 0, img.name, nil)
		if err != nil {
			return loaded{}, fmt.Errorf("%s: reserve %#x bytes: %w", img.path, hi-lo, err)
		}
		base = at - lo
	}
	var l loaded
	l.base = base
	l.entry = base + ef.Entry
	for _, ph := range ef.Progs {
		if ph.Type == elf.PT_PHDR {
			l.phdr = base + ph.Vaddr
		}
		if ph.Type != elf.PT_LOAD {
			continue
		}
		start := pageDown(base + ph.Vaddr)
		end := pageUp(base + ph.Vaddr + ph.Memsz)
		delta := base + ph.Vaddr - start
		fileStart := ph.Off - delta
		fileLen := delta + ph.Filesz
		f := img.file
		fill := func(off uint64, dst []byte) error {
			if off >= fileLen {
				return nil
			}
			n := min(uint64(len(dst)), fileLen-off)
			_, err := f.Pread(dst[:n], int64(fileStart+off))
			return err
		}
		var err error
		if key, ok := keyOf(f, fileStart, fileLen); ok && fileLen > 0 {
			_, err = p.k.pages.mapSegment(p.k, p.as, start, end-start, elfProt(ph.Flags), memgrant.MapFixed, img.name, key, fill)
		} else {
			_, err = p.k.svc.Map(p.as, start, end-start, elfProt(ph.Flags), memgrant.MapFixed, img.name, fill)
		}
		if err != nil {
			return loaded{}, fmt.Errorf("%s: map segment at %#x: %w", img.path, start, err)
		}
		if l.phdr == 0 && img.phoff >= ph.Off && img.phoff < ph.Off+ph.Filesz {
			l.phdr = base + ph.Vaddr + (img.phoff - ph.Off)
		}
		l.end = max(l.end, end)
	}
	return l, nil
}

func elfProt(f elf.ProgFlag) memgrant.Prot {
	var p memgrant.Prot
	if f&elf.PF_R != 0 {
		p |= memgrant.ProtRead
	}
	if f&elf.PF_W != 0 {
		p |= memgrant.ProtWrite
	}
	if f&elf.PF_X != 0 {
		p |= memgrant.ProtExec
	}
	return p
}

// Auxiliary vector keys.
const (
	atNull        = 0
	atPhdr        = 3
	atPhent       = 4
	atPhnum       = 5
	atPagesz      = 6
	atBase        = 7
	atFlags       = 8
	atEntry       = 9
	atUID         = 11
	atEUID        = 12
	atGID         = 13
	atEGID        = 14
	atPlatform    = 15
	atHwcap       = 16
	atClktck      = 17
	atSecure      = 23
	atRandom      = 25
	atHwcap2      = 26
	atExecfn      = 31
	atSysinfoEhdr = 33
	atMinsigstksz = 51
)

// hostAuxv holds the sandbox's own CPU capability entries, passed on to tenants.
type hostAuxv struct {
	hwcap, hwcap2, minsigstksz, clktck uint64
}

func readHostAuxv() hostAuxv {
	h := hostAuxv{clktck: 100, minsigstksz: 2048}
	b, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return h
	}
	for i := 0; i+16 <= len(b); i += 16 {
		k, v := binary.LittleEndian.Uint64(b[i:]), binary.LittleEndian.Uint64(b[i+8:])
		switch k {
		case atHwcap:
			h.hwcap = v
		case atHwcap2:
			h.hwcap2 = v
		case atMinsigstksz:
			h.minsigstksz = v
		case atClktck:
			h.clktck = v
		}
	}
	return h
}

// load maps the program (and its interpreter), its stack and heap start, and returns the
// registers at its entry.
func (p *Process) load(img *image, argv, env []string) (unix.PtraceRegs, error) {
	hint := uint64(0)
	if img.elf.Type == elf.ET_DYN {
		hint = pieBase
	}
	main, err := p.mapImage(img, hint)
	if err != nil {
		return unix.PtraceRegs{}, err
	}
	entry, interpBase := main.entry, uint64(0)
	if img.interp != nil {
		in, err := p.mapImage(img.interp, 0)
		if err != nil {
			return unix.PtraceRegs{}, err
		}
		entry, interpBase = in.entry, in.base
	}
	p.brkStart, p.brk = main.end, main.end

	sp, err := p.buildStack(img, main, interpBase, argv, env)
	if err != nil {
		return unix.PtraceRegs{}, err
	}
	return unix.PtraceRegs{Rip: entry, Rsp: sp, Eflags: 0x202}, nil
}

// buildStack maps the stack and writes argc, argv, envp and the auxiliary vector the way Linux
// lays them out, returning the initial stack pointer.
func (p *Process) buildStack(img *image, main loaded, interpBase uint64, argv, env []string) (uint64, error) {
	size := 0
	for _, s := range argv {
		size += len(s) + 1
	}
	for _, s := range env {
		size += len(s) + 1
	}
	if size > maxArgBytes {
		return 0, fmt.Errorf("arguments and environment: %d bytes: %w", size, unix.E2BIG)
	}
	// The stack's top is mapped at once; the rest of its 8 MiB fills on fault, so that a
	// process does not hold (and fork does not copy) memory its stack never reaches.
	rw := memgrant.ProtRead | memgrant.ProtWrite
	base, err := p.k.svc.Map(p.as, 0, stackSize, rw, memgrant.MapGrowsDown|memgrant.MapNoReserve, "[stack]", nil)
	if err != nil {
		return 0, fmt.Errorf("map stack: %w", err)
	}
	top := base + stackSize
	if _, err := p.k.svc.Map(p.as, top-stackEager, stackEager, rw, memgrant.MapFixed|memgrant.MapGrowsDown, "[stack]", nil); err != nil {
		return 0, fmt.Errorf("map stack: %w", err)
	}

	// Strings at the top: execfn, then argv and envp, then the platform name and random bytes.
	var strs []byte
	put := func(s string) uint64 {
		off := uint64(len(strs))
		strs = append(strs, s...)
		strs = append(strs, 0)
		return off
	}
	argOffs := make([]uint64, len(argv))
	for i, s := range argv {
		argOffs[i] = put(s)
	}
	envOffs := make([]uint64, len(env))
	for i, s := range env {
		envOffs[i] = put(s)
	}
	execfn := put(img.path)
	platform := put("x86_64")
	random := uint64(len(strs))
	var rnd [16]byte
	rand.Read(rnd[:])
	strs = append(strs, rnd[:]...)
	strBase := (top - uint64(len(strs)) - 8) &^ 15

	auxv := []uint64{
		atPhdr, main.phdr, atPhent, 56, atPhnum, uint64(len(img.elf.Progs)), atPagesz, memgrant.PageSize,
		atBase, interpBase, atFlags, 0, atEntry, main.entry,
		atUID, 0, atEUID, 0, atGID, 0, atEGID, 0, atSecure, 0,
		atHwcap, p.k.auxv.hwcap, atHwcap2, p.k.auxv.hwcap2, atClktck, p.k.auxv.clktck,
		atMinsigstksz, p.k.auxv.minsigstksz,
		atRandom, strBase + random, atExecfn, strBase + execfn, atPlatform, strBase + platform,
	}
	if vdso := p.stub.VDSO(); vdso != 0 {
		auxv = append(auxv, atSysinfoEhdr, vdso)
	}
	auxv = append(auxv, atNull, 0)

	words := 1 + len(argv) + 1 + len(env) + 1 + len(auxv)
	sp := (strBase - uint64(words*8)) &^ 15
	vec := make([]byte, 0, words*8)
	w := func(v uint64) { vec = binary.LittleEndian.AppendUint64(vec, v) }
	w(uint64(len(argv)))
	for _, o := range argOffs {
		w(strBase + o)
	}
	w(0)
	for _, o := range envOffs {
		w(strBase + o)
	}
	w(0)
	for _, v := range auxv {
		w(v)
	}
	if sp < base+memgrant.PageSize {
		return 0, fmt.Errorf("arguments do not fit the stack: %w", unix.E2BIG)
	}
	if err := p.k.svc.CopyOut(p.as, strBase, strs); err != nil {
		return 0, fmt.Errorf("write stack strings: %w", err)
	}
	if err := p.k.svc.CopyOut(p.as, sp, vec); err != nil {
		return 0, fmt.Errorf("write stack vector: %w", err)
	}
	return sp, nil
}
