// Package shim is Endo's containerd shim v2 (runtime io.containerd.endo.v1): the `start` and
// `delete` actions, the task API v3, events, stdio, rootfs mounts and stats. One shim serves one
// pod: it boots the pod's sandbox (`endo boot`) with the first container and drives it over the
// control API.
//
// The shim is host-facing and trusted: it must never import or run the kernel proper (that lives
// in the sandbox process), never run tenant code, and never tear down a pod that other
// containers still use.
package shim
