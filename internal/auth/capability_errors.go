package auth

import (
	"errors"
	"fmt"

	"github.com/weftfs/weft/internal/errs"
)

// Reason says why a capability was refused. Every refusal is
// errs.CapabilityRefused on the wire (the client fetches a fresh capability
// whatever the reason); the reason is for logs, metrics and tests.
type Reason uint8

const (
	ReasonMissing     Reason = iota + 1 // the request carried none
	ReasonMalformed                     // wrong length, version or fields
	ReasonUnknownKey                    // a key id no meta server has
	ReasonForged                        // the tag does not match
	ReasonExpired                       // past its expiry
	ReasonWrongInode                    // for another file
	ReasonWrongRange                    // for other chunks of the file
	ReasonWrongRights                   // lacks a right the request needs
	ReasonRevoked                       // older than the file's generation, or issued before the floor
	ReasonWrongHolder                   // same-host path: the peer is not the holder
)

var reasonNames = map[Reason]string{
	ReasonMissing: "missing", ReasonMalformed: "malformed", ReasonUnknownKey: "unknown key",
	ReasonForged: "forged", ReasonExpired: "expired", ReasonWrongInode: "wrong inode",
	ReasonWrongRange: "wrong range", ReasonWrongRights: "wrong rights", ReasonRevoked: "revoked",
	ReasonWrongHolder: "wrong holder",
}

func (r Reason) String() string {
	if s, ok := reasonNames[r]; ok {
		return s
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// RefusedError is a refused capability: errs.CapabilityRefused with a reason.
type RefusedError struct {
	Reason Reason
	Msg    string
}

func (e *RefusedError) Error() string {
	return "capability refused (" + e.Reason.String() + "): " + e.Msg
}

// Is makes errs.Is(err, errs.CapabilityRefused) hold.
func (e *RefusedError) Is(target error) bool { return target == errs.CapabilityRefused }

func refused(r Reason, format string, args ...any) error {
	return &errs.Error{Kind: errs.CapabilityRefused, Op: "check capability",
		Err: &RefusedError{Reason: r, Msg: fmt.Sprintf(format, args...)}}
}

// ReasonOf returns why err refused a capability, or 0 if it did not (or
// came over the wire, which carries the kind only).
func ReasonOf(err error) Reason {
	var r *RefusedError
	if errors.As(err, &r) {
		return r.Reason
	}
	return 0
}

// WrongHolder is the refusal of a same-host request from a process whose uid
// is neither root nor the capability's holder.
func WrongHolder(peerUID, holder uint32) error {
	return refused(ReasonWrongHolder, "same-host request from uid %d with a capability for uid %d", peerUID, holder)
}
