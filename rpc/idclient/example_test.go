package idclient_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/rpc"
	"github.com/idgen/idgen/rpc/idclient"
)

// A shortener service takes codes from a Pool. In production the target is
// the idgend nodes, e.g. "idgen-1:50051,idgen-2:50051,idgen-3:50051" or
// "dns:///idgen.internal:50051".
func Example() {
	target := startDemoNode() // one in-process node, so the example runs

	client, err := idclient.Dial(target, idclient.WithCallTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	pool, err := idclient.NewPool(client, idclient.PoolOptions{Lookahead: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	code, err := pool.NextCode(ctx) // usually no network call: served from a prefetched batch
	if err != nil {
		log.Fatal(err)
	}
	id, _ := generator.Decode(code)
	parts, _ := generator.DefaultLayout().Decompose(id)
	fmt.Println("slot:", parts.Slot)
	// Output: slot: 3
}

// startDemoNode runs an rpc.Server whose backend mints from slot 3.
func startDemoNode() string {
	srv, err := rpc.NewServer(rpc.ServerConfig{
		Backend: &demoNode{layout: generator.DefaultLayout()},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	return lis.Addr().String()
}

type demoNode struct {
	mu     sync.Mutex
	layout generator.Layout
	next   int64
}

func (d *demoNode) NextBatch(_ context.Context, n int) ([]int64, int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ids := make([]int64, n)
	for i := range ids {
		per := d.layout.SequencePerUnit()
		ids[i], _ = d.layout.Compose(1+d.next/per, 3, d.next%per)
		d.next++
	}
	return ids, 3, nil
}
func (d *demoNode) Ready() (bool, string)                             { return true, "" }
func (d *demoNode) Conflict() error                                   { return nil }
func (d *demoNode) Withdrawn(int64) bool                              { return false }
func (d *demoNode) Members() ([]cluster.MemberInfo, string)           { return nil, "" }
func (d *demoNode) Status() cluster.Status                            { return cluster.Status{Slot: 3, Layout: d.layout} }
func (d *demoNode) Join([]string) (int, error)                        { return 0, nil }
func (d *demoNode) Leave(context.Context) error                       { return nil }
func (d *demoNode) SetClockOffset(time.Duration) error                { return nil }
func (d *demoNode) History(context.Context) ([]cluster.Tenure, error) { return nil, nil }
func (d *demoNode) Remove(context.Context, string) (string, int, error) {
	return "", -1, cluster.ErrUnknownNode
}
func (d *demoNode) ApplyForwarded(context.Context, []byte) ([]byte, error) {
	return nil, cluster.ErrNotLeader
}

func (d *demoNode) SightedCopy(string) {}
