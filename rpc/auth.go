package rpc

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/idgen/idgen/rpc/tlsconf"
)

// Limits on what any caller can make a node do. Every request of this API is
// a few hundred bytes at most (a forwarded command carries bounded names and
// addresses), so 64 KiB refuses floods without refusing anything real.
const (
	// MaxRequestBytes is the largest request message a node accepts.
	MaxRequestBytes = 64 << 10
	// MaxHeaderBytes bounds a call's metadata.
	MaxHeaderBytes = 16 << 10
	// MaxConcurrentStreams caps calls in flight per connection.
	MaxConcurrentStreams = 256
	// MaxJoinAddrs bounds the addresses of one Join: each may cost a dial.
	MaxJoinAddrs = 16
	// MaxFaultOffsetMS bounds the clock offset Fault may set: one hour.
	MaxFaultOffsetMS = 3600 * 1000
)

// anyRole marks methods every certificate from the CA may call.
const anyRole tlsconf.Role = ""

// methodRoles decides, by method prefix, the role a call needs when TLS is
// on. The first match wins; a method that matches nothing needs admin, so a
// method added later is closed until it is listed here.
var methodRoles = []struct {
	prefix string
	role   tlsconf.Role
}{
	{"/idgen.v1.IDService/", anyRole},
	{"/grpc.health.v1.Health/", anyRole},
	{"/grpc.reflection.", anyRole},
	{"/idgen.v1.ClusterService/Members", anyRole},
	{"/idgen.v1.ClusterService/Status", anyRole},
	{"/idgen.v1.ClusterService/History", anyRole},
	{"/idgen.v1.ClusterService/", tlsconf.RoleAdmin},
	{"/idgen.v1.PeerService/", tlsconf.RoleServer},
}

// RequiredRole is the role a caller needs for fullMethod ("" means any role).
func RequiredRole(fullMethod string) tlsconf.Role {
	for _, m := range methodRoles {
		if strings.HasPrefix(fullMethod, m.prefix) {
			return m.role
		}
	}
	return tlsconf.RoleAdmin
}

// authorize checks the caller's certificate role against the method. The TLS
// handshake already verified the chain to the CA; this reads the role the CA
// signed into it.
func authorize(ctx context.Context, fullMethod string) error {
	need := RequiredRole(fullMethod)
	p, ok := peer.FromContext(ctx)
	if !ok {
		return status.Error(codes.Unauthenticated, "no peer information: TLS is required")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return status.Error(codes.Unauthenticated, "no verified client certificate: call with a certificate from the cluster CA (idctl tls cert create)")
	}
	leaf := info.State.VerifiedChains[0][0]
	role, err := tlsconf.RoleOf(leaf)
	if err != nil {
		return status.Errorf(codes.PermissionDenied, "%s: %v", fullMethod, err)
	}
	if need != anyRole && role != need {
		return status.Errorf(codes.PermissionDenied, "%s needs a certificate with role %s; %q has role %s (make one with idctl tls cert create --role %s)",
			fullMethod, need, leaf.Subject.CommonName, role, need)
	}
	return nil
}

func authUnary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := authorize(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

func authStream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := authorize(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}
