// Package control is the private API between the shim and its sandbox (`endo boot`): the request
// and reply types, the client the shim uses and the server the sandbox runs.
//
// Transport: the sandbox listens on a unix socket; the shim opens exactly two connections to it.
// The first is the session: it carries host file descriptors (the tenant's stdio) with
// SCM_RIGHTS, which ttrpc cannot carry, and its end of file tells the sandbox that its shim is
// gone. The second carries ttrpc calls. Once both are open the sandbox unlinks the socket, so no
// one else can connect and nothing is left on disk.
//
// Encoding: ttrpc needs protobuf messages; both ends are built from the same tree, so each message
// is a Go struct encoded as JSON inside a protobuf BytesValue. That keeps the schema in one
// readable Go file with no generated code.
//
// This package must never import the kernel proper: the shim links it.
package control
