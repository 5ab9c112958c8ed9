package client

import (
	"context"

	"github.com/weftfs/weft/internal/auth"
)

// RenewCapability fetches a fresh read capability for f (tests and
// benchmarks of the round trip).
func (f *File) RenewCapability(ctx context.Context) error {
	_, err := f.c.refreshCapability(ctx, f.n, auth.Read)
	return err
}
