// Package runtime turns an OCI bundle into what Endo runs: the container's process, its mounts,
// the pod it belongs to and the pod's resources, and it keeps the state machine of containers and
// exec processes (created, running, stopped) with their exit statuses.
//
// It is shared by the shim and the sandbox, so it must never import the kernel proper, touch the
// host (mount, spawn, signal) or talk to containerd: it only reads bundles and keeps state.
package runtime
