package control

import (
	"context"
	"errors"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// codeOf pairs containerd's error classes with the wire codes containerd itself uses for them,
// so an errdefs class survives the trip sandbox → shim → containerd → ctr.
var codeOf = []struct {
	is   func(error) bool
	code codes.Code
	err  error
}{
	{errdefs.IsNotFound, codes.NotFound, errdefs.ErrNotFound},
	{errdefs.IsAlreadyExists, codes.AlreadyExists, errdefs.ErrAlreadyExists},
	{errdefs.IsFailedPrecondition, codes.FailedPrecondition, errdefs.ErrFailedPrecondition},
	{errdefs.IsInvalidArgument, codes.InvalidArgument, errdefs.ErrInvalidArgument},
	{errdefs.IsNotImplemented, codes.Unimplemented, errdefs.ErrNotImplemented},
	{errdefs.IsUnavailable, codes.Unavailable, errdefs.ErrUnavailable},
	{errdefs.IsPermissionDenied, codes.PermissionDenied, errdefs.ErrPermissionDenied},
	{errdefs.IsResourceExhausted, codes.ResourceExhausted, errdefs.ErrResourceExhausted},
	{errdefs.IsConflict, codes.FailedPrecondition, errdefs.ErrConflict},
	{errdefs.IsAborted, codes.Aborted, errdefs.ErrAborted},
	{errdefs.IsCanceled, codes.Canceled, context.Canceled},
	{errdefs.IsDeadlineExceeded, codes.DeadlineExceeded, context.DeadlineExceeded},
}

// ToGRPC turns an error into a wire status whose code keeps its errdefs class; the message is
// the error's one line. nil stays nil; an error that already is a status is kept.
func ToGRPC(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return status.Error(codes.Canceled, err.Error())
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	for _, c := range codeOf {
		if c.is(err) {
			return status.Error(c.code, err.Error())
		}
	}
	return status.Error(codes.Unknown, err.Error())
}

// wireError is an error read off the wire: its message, and the errdefs class of its code.
type wireError struct {
	msg   string
	class error
}

func (e *wireError) Error() string { return e.msg }
func (e *wireError) Unwrap() error { return e.class }

// FromGRPC turns a wire status back into an error that errdefs.Is* recognises.
func FromGRPC(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, c := range codeOf {
		if c.code == st.Code() {
			return &wireError{msg: st.Message(), class: c.err}
		}
	}
	return errors.New(st.Message())
}
