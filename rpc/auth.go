package rpc

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"

	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
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

// methodRoles is the role each method needs when TLS is on, by full method
// name: never by prefix, so that a method added later (a ClusterService
// "MembersRemove", an IDService "Drain") is not open because its name begins
// like an open one. A method not listed needs admin, so it is closed until
// it is listed here; TestEveryServedMethodIsListed keeps the list complete.
var methodRoles = map[string]tlsconf.Role{
	idgenv1.IDService_GetIDBatch_FullMethodName:                            anyRole,
	healthpb.Health_Check_FullMethodName:                                   anyRole,
	healthpb.Health_Watch_FullMethodName:                                   anyRole,
	healthpb.Health_List_FullMethodName:                                    anyRole,
	reflectionv1.ServerReflection_ServerReflectionInfo_FullMethodName:      anyRole,
	reflectionv1alpha.ServerReflection_ServerReflectionInfo_FullMethodName: anyRole,
	idgenv1.ClusterService_Members_FullMethodName:                          anyRole,
	idgenv1.ClusterService_Status_FullMethodName:                           anyRole,
	idgenv1.ClusterService_History_FullMethodName:                          anyRole,
	idgenv1.ClusterService_Join_FullMethodName:                             tlsconf.RoleAdmin,
	idgenv1.ClusterService_Leave_FullMethodName:                            tlsconf.RoleAdmin,
	idgenv1.ClusterService_Remove_FullMethodName:                           tlsconf.RoleAdmin,
	idgenv1.ClusterService_Fault_FullMethodName:                            tlsconf.RoleAdmin,
	// A follower forwarding a Claim, Reserve, Release or Remove to the
	// leader. A server may thus remove a node too; it already speaks Raft.
	idgenv1.PeerService_Apply_FullMethodName: tlsconf.RoleServer,
}

// RequiredRole is the role a caller needs for fullMethod ("" means any role).
func RequiredRole(fullMethod string) tlsconf.Role {
	if r, ok := methodRoles[fullMethod]; ok {
		return r
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
