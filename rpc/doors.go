package rpc

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/idgen/idgen/cluster/door"
)

// The gRPC port's bounds (cmd/idgend/README.md, "Securing a cluster"), beside the
// per-call ones in auth.go (MaxRequestBytes, MaxHeaderBytes,
// MaxConcurrentStreams).
const (
	// HandshakeTimeout bounds a new connection's TLS handshake and HTTP/2
	// preface (grpc.ConnectionTimeout; gRPC's default is 120 s).
	HandshakeTimeout = 5 * time.Second
	// DefaultMaxConnectionIdle closes a connection with no call for this
	// long (with a GOAWAY: clients dial again on their next call).
	DefaultMaxConnectionIdle = 5 * time.Minute
	// DefaultMaxConnections caps the port's open connections, handshaking
	// or not; one past it is closed at once.
	DefaultMaxConnections = 1024
	// MaxStreamsPerConn caps the streaming calls (Health.Watch,
	// reflection) open at once on one connection: they last as long as the
	// caller likes, a goroutine each. Unary calls end by their deadline and
	// are capped by MaxConcurrentStreams.
	MaxStreamsPerConn = 8
	// MaxStreams caps the streaming calls open at once on the whole server.
	MaxStreams = 512
)

// streamLimit counts the streaming calls open, per connection and in all.
type streamLimit struct {
	perConn, total int

	mu     sync.Mutex
	byConn map[string]int
	open   int
}

func newStreamLimit(perConn, total int) *streamLimit {
	return &streamLimit{perConn: perConn, total: total, byConn: map[string]int{}}
}

// connKey names the connection a call came on: its remote address, which
// no two open connections share.
func connKey(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

func (l *streamLimit) acquire(conn string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.byConn[conn] >= l.perConn:
		return status.Errorf(codes.ResourceExhausted,
			"this connection already has %d streaming calls open, the most a connection may hold; close one or use another connection", l.perConn)
	case l.open >= l.total:
		return status.Errorf(codes.ResourceExhausted,
			"the server already has %d streaming calls open, the most it holds; try again later", l.total)
	}
	l.byConn[conn]++
	l.open++
	return nil
}

func (l *streamLimit) release(conn string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byConn[conn]--; l.byConn[conn] <= 0 {
		delete(l.byConn, conn)
	}
}

// interceptor refuses a streaming call past either cap with
// ResourceExhausted, before its handler runs.
func (l *streamLimit) interceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		conn := connKey(ss.Context())
		if err := l.acquire(conn); err != nil {
			return err
		}
		defer l.release(conn)
		return handler(srv, ss)
	}
}

// limitListener caps lis at max open connections; the ones refused are
// logged once a minute per peer, with a count.
func limitListener(lis net.Listener, max int, log *slog.Logger) net.Listener {
	refusals := door.NewRateLog(log.With("component", "grpc"), 0)
	return door.Limit(lis, max, func(remote net.Addr, err error) {
		refusals.Log(slog.LevelWarn, "cap", door.Peer(remote), "refused a gRPC connection: the port holds its cap of open connections",
			"remote", remote.String(), "cap", max)
	})
}
