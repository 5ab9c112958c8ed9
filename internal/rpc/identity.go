package rpc

import (
	"context"
	"crypto/tls"
	"crypto/x509"

	"github.com/weftfs/weft/internal/errs"
)

// Peer identities. A server with TLS verifies its clients' certificates
// during the handshake; ServerOptions.Identify then turns the verified
// chain into an identity (package auth's, opaque here so that rpc does not
// depend on it), which every handler of the connection finds with
// PeerIdentity and which ServerOptions.Authorize checks against the method
// before the handler runs. In-process calls (local.go) carry the caller's
// DialOptions.Identity instead, since they have no handshake.

type identityKey struct{}

// PeerIdentity returns the identity of the peer whose request a handler
// serves, as ServerOptions.Identify or DialOptions.Identity gave it; nil
// when the server identifies nobody.
func PeerIdentity(ctx context.Context) any {
	return ctx.Value(identityKey{})
}

// withIdentity returns ctx carrying id; a nil id changes nothing.
func withIdentity(ctx context.Context, id any) context.Context {
	if id == nil {
		return ctx
	}
	return context.WithValue(ctx, identityKey{}, id)
}

// identify runs the server's Identify on a TLS connection's verified chain.
func (s *Server) identify(nc any) (any, error) {
	if s.opts.Identify == nil {
		return nil, nil
	}
	var chain []*x509.Certificate
	if tc, ok := nc.(*tls.Conn); ok {
		chain = tc.ConnectionState().PeerCertificates
	}
	id, err := s.opts.Identify(chain)
	if err != nil {
		return nil, errs.WithPath(err, "rpc identify peer", "")
	}
	return id, nil
}

// authorize checks a call against the server's policy; nil if it has none.
func authorize(policy func(method uint16, peer any) error, method uint16, peer any) error {
	if policy == nil {
		return nil
	}
	if err := policy(method, peer); err != nil {
		if !errs.Is(err, errs.Permission) {
			err = errs.Wrap(errs.Permission, "rpc authorize", "", err)
		}
		return err
	}
	return nil
}
