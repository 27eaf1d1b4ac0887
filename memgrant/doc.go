// Package memgrant is the grant table of an Endo sandbox: the one memory file (memfd)
// that holds all of a pod's memory, its frames and their reference counts, and the
// tenant address spaces built from those frames (VMAs, a software page table, copy in
// and out).
//
// memgrant is part of the trusted endovisor core. It keeps the truth about which frame
// is mapped where and checks every host mapping command against it: a frame reaches a
// tenant address space only if it is allocated in this Grant and held by that address
// space's page table.
//
// It must never make host mmap/mprotect/munmap calls in a stub itself (it only issues
// batched HostOps to a HostMapper), never map anything that is not a frame of its own
// memory file, never hand a frame back to the free pool while any address space still
// maps it, and never import the kernel proper.
//
// The host side (the crossing's stub control thread, or LocalMapper in tests) receives
// batches of HostOps through HostMapper.Apply and must apply them in order:
//
//   - OpMap: mmap(Addr, Length, Prot, MAP_SHARED|MAP_FIXED|MAP_POPULATE, grant fd, Offset).
//     memgrant only issues it for frames the address space holds, inside the Layout.
//   - OpProtect: mprotect(Addr, Length, Prot), only over pages mapped by OpMap.
//   - OpUnmap: munmap(Addr, Length), or an inaccessible reservation in its place. The
//     range may span holes; it never touches Layout.Reserved.
//
// Frames are given back to the grant only after the Apply that removed them returned
// nil; if Apply fails the address space refuses further changes (EIO) and keeps the
// frames until Release, which must come after the stub is gone.
//
// Fork shares private pages copy-on-write (the frames' reference counts say who holds
// them; a write fault copies, or takes back the last reference) and shared anonymous
// mappings for real, through a shared object that holds their frames by page index.
package memgrant
