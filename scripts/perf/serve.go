package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/generator"
	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/rpc"
	"github.com/idgen/idgen/rpc/tlsconf"
)

// bareServer is the baseline: a plain grpc.Server of the same proto whose
// GetIDBatch returns count numbers from a counter, with nothing else.
type bareServer struct {
	idgenv1.UnimplementedIDServiceServer
	next atomic.Int64
}

func (b *bareServer) GetIDBatch(_ context.Context, req *idgenv1.GetIDBatchRequest) (*idgenv1.GetIDBatchResponse, error) {
	n := int64(max(req.GetCount(), 1))
	end := b.next.Add(n)
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = end - n + int64(i)
	}
	return &idgenv1.GetIDBatchResponse{Ids: ids}, nil
}

// unlimited is an rpc.Backend whose generator has a window far ahead of the
// clock: idgend's server stack, minting real IDs, without the layout's cap
// of 2048 IDs a second per slot (which a call benchmark would otherwise
// measure).
type unlimited struct{ g *generator.Generator }

func newUnlimited() (*unlimited, error) {
	l := generator.DefaultLayout()
	floor := l.Units(time.Now())
	g, err := generator.New(l, 0, floor, nil)
	if err != nil {
		return nil, err
	}
	g.Grant(floor + 1<<20)
	return &unlimited{g: g}, nil
}

func (u *unlimited) NextBatch(ctx context.Context, n int) ([]int64, int, error) {
	ids, err := u.g.NextBatch(ctx, n)
	return ids, 0, err
}
func (u *unlimited) Ready() (bool, string)                   { return true, "" }
func (u *unlimited) Conflict() error                         { return nil }
func (u *unlimited) Withdrawn(int64) bool                    { return false }
func (u *unlimited) Members() ([]cluster.MemberInfo, string) { return nil, "" }
func (u *unlimited) Status() cluster.Status                  { return cluster.Status{Slot: 0, Layout: u.g.Layout()} }
func (u *unlimited) Join([]string) (int, error)              { return 0, errNotHere }
func (u *unlimited) Leave(context.Context) error             { return errNotHere }
func (u *unlimited) SetClockOffset(time.Duration) error      { return errNotHere }
func (u *unlimited) ApplyForwarded(context.Context, []byte) ([]byte, error) {
	return nil, errNotHere
}
func (u *unlimited) SightedCopy(string)                                {}
func (u *unlimited) History(context.Context) ([]cluster.Tenure, error) { return nil, errNotHere }
func (u *unlimited) Remove(context.Context, string) (string, int, error) {
	return "", 0, errNotHere
}

// serve runs one benchmark server ("bare" or "stack") on addr until SIGTERM.
// With a TLS directory it speaks mutual TLS with server.pem from it.
func serve(kind, addr, tlsDir string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	var tcfg *credentials.TransportCredentials
	var m *tlsconf.Material
	if tlsDir != "" {
		m, err = tlsconf.Load(tlsconf.Files{Cert: tlsconf.CertFile(tlsDir, "server"), Key: tlsconf.KeyFile(tlsDir, "server"),
			CA: tlsconf.CertFile(tlsDir, "ca")})
		if err != nil {
			return err
		}
		c := credentials.NewTLS(m.ServerConfig())
		tcfg = &c
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	switch kind {
	case "bare":
		var opts []grpc.ServerOption
		if tcfg != nil {
			opts = append(opts, grpc.Creds(*tcfg))
		}
		s := grpc.NewServer(opts...)
		idgenv1.RegisterIDServiceServer(s, &bareServer{})
		go func() { <-stop; s.Stop() }()
		return s.Serve(lis)
	case "stack":
		u, err := newUnlimited()
		if err != nil {
			return err
		}
		cfg := rpc.ServerConfig{Backend: u, NodeName: "bench", NodeID: "bench",
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		if m != nil {
			cfg.TLS = m.ServerConfig()
		}
		s, err := rpc.NewServer(cfg)
		if err != nil {
			return err
		}
		go func() { <-stop; s.Shutdown(time.Second) }()
		if err := s.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return err
		}
		return nil
	}
	return fmt.Errorf("%w: server kind %q, want bare or stack", errUsage, kind)
}
