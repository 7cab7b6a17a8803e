package rpc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/idgen/idgen/cluster"
	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
)

type peerService struct {
	idgenv1.UnimplementedPeerServiceServer
	peer Peer
}

// Apply runs a command a follower forwarded. Errors travel back with their
// sentinel (see ToStatus), so the follower's cluster code can errors.Is them.
func (h *peerService) Apply(ctx context.Context, req *idgenv1.ApplyRequest) (*idgenv1.ApplyResponse, error) {
	if len(req.GetCommand()) == 0 {
		return nil, ToStatus(fmt.Errorf("%w: empty command", errBadRequest))
	}
	res, err := h.peer.ApplyForwarded(ctx, req.GetCommand())
	if err != nil {
		return nil, ToStatus(err)
	}
	return &idgenv1.ApplyResponse{Result: res}, nil
}

// DefaultForwardTimeout bounds a forwarded command whose context has no
// deadline (the server refuses calls without one).
const DefaultForwardTimeout = 5 * time.Second

// ErrForwarderClosed is returned by Forward after Close.
var ErrForwarderClosed = errors.New("peer forwarder closed")

// PeerForwarder implements cluster.Forwarder over PeerService.Apply, keeping
// one connection per leader address.
type PeerForwarder struct {
	dialOpts []grpc.DialOption

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

var _ cluster.Forwarder = (*PeerForwarder)(nil)

// NewPeerForwarder returns a forwarder dialing peers with keepalive and
// insecure credentials; extra options are appended, so transport credentials
// among them replace the insecure ones (idgend passes the node's server
// certificate, which the leader's PeerService requires with TLS on).
func NewPeerForwarder(opts ...grpc.DialOption) *PeerForwarder {
	base := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                20 * time.Second, // above the server's 10 s MinTime
			Timeout:             5 * time.Second,
			PermitWithoutStream: true,
		}),
	}
	return &PeerForwarder{dialOpts: append(base, opts...), conns: make(map[string]*grpc.ClientConn)}
}

// Forward sends command to the leader at leaderGRPCAddr. A sentinel error the
// leader returned comes back as that sentinel (errors.Is works); when ctx
// ended, the error also matches ctx's error. An error without a known outcome
// must be treated as "not applied or unknown" by the caller.
func (f *PeerForwarder) Forward(ctx context.Context, leaderGRPCAddr string, command []byte) ([]byte, error) {
	conn, err := f.conn(leaderGRPCAddr)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultForwardTimeout)
		defer cancel()
	}
	resp, err := idgenv1.NewPeerServiceClient(conn).Apply(ctx, &idgenv1.ApplyRequest{Command: command})
	if err != nil {
		err = ErrorFromStatus(err)
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("forward to leader %s: %w (%w)", leaderGRPCAddr, cerr, err)
		}
		return nil, fmt.Errorf("forward to leader %s: %w", leaderGRPCAddr, err)
	}
	return resp.GetResult(), nil
}

func (f *PeerForwarder) conn(addr string) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrForwarderClosed
	}
	if c, ok := f.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, f.dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("forward: dial leader %s: %w", addr, err)
	}
	f.conns[addr] = c
	return c, nil
}

// Close closes every cached connection; Forward fails afterwards.
func (f *PeerForwarder) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	var errs []error
	for addr, c := range f.conns {
		errs = append(errs, c.Close())
		delete(f.conns, addr)
	}
	return errors.Join(errs...)
}
