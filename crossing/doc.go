// Package crossing is the boundary between tenant code and the sandbox.
//
// It holds the stub program (a freestanding host process per tenant address space), the sysmsg
// protocol by which a stub thread's trap reaches the sandbox and is resumed, the seccomp filters
// that leave tenant threads no host system call of their own, the control thread's command page
// through which the sandbox changes a stub's address space, and the service table through which
// the kernel proper asks the endovisor core for work.
//
// It must never interpret a tenant system call (that is the kernel proper's job) and never trust
// anything a stub writes beyond the registers of that stub's own threads.
package crossing
