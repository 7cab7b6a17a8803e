// Command idgend runs one node of an idgen cluster: it joins the cluster by
// gossip and Raft, claims one of the eight datacenter/machine slots and serves
// unique IDs over gRPC, with an HTTP admin port for health and metrics.
//
//	go run ./cmd/idgend     # a single-node cluster, data in ./data, IDs on :50051
//
// See idgend -h for the flags; each is also read from IDGEN_<FLAG>.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/rpc"
	"github.com/idgen/idgen/rpc/buildinfo"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // could not start, or failed while running
	exitUsage   = 2 // bad flags or environment
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], osEnv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole program; ctx ends on SIGINT/SIGTERM.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "idgend: %s\n", strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		fmt.Fprintln(stderr, "run idgend -h for the flags")
		return exitUsage
	}
	if cfg.ShowVersion {
		fmt.Fprintf(stdout, "idgend %s\n", buildinfo.Read())
		return exitOK
	}
	log := newLogger(cfg, stderr)
	if cfg.CheckOnly {
		return check(cfg, log, stdout, stderr)
	}
	if err := serve(ctx, cfg, log); err != nil {
		log.Error("idgend stopped with an error", "err", err)
		fmt.Fprintf(stderr, "idgend: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// serve opens the ports, then the node, and serves until ctx ends or the node
// leaves the cluster. A nil return means a clean stop.
func serve(ctx context.Context, cfg Config, log *slog.Logger) error {
	sec, err := loadSecurity(cfg, log)
	if err != nil {
		return err
	}
	limit, known := openFileLimit()
	checkDescriptors(cfg.Bounds, limit, known, log)
	// Ports first: a port in use is reported before the data dir is touched.
	grpcLis, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("--grpc-addr %s: %w (is another idgend running? pick a free port)", cfg.GRPCAddr, err)
	}
	defer grpcLis.Close()
	httpLis, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("--http-addr %s: %w (is another idgend running? pick a free port)", cfg.HTTPAddr, err)
	}
	defer httpLis.Close()
	// Raft and memberlist open their own sockets inside cluster.Open; probe
	// them here so a busy port is named by its flag. (A port taken between the
	// probe and the open still fails, with the library's message.)
	if err := probePort("tcp", cfg.RaftAddr); err != nil {
		return fmt.Errorf("--raft-addr %s: %w (pick a free port)", cfg.RaftAddr, err)
	}
	if err := probePort("tcp", cfg.GossipAddr); err != nil {
		return fmt.Errorf("--gossip-addr %s: %w (pick a free port)", cfg.GossipAddr, err)
	}
	if err := probePort("udp", cfg.GossipAddr); err != nil {
		return fmt.Errorf("--gossip-addr %s (udp): %w (pick a free port)", cfg.GossipAddr, err)
	}

	adv := func(bind string, actual net.Addr) (string, error) {
		host, err := advertiseHost(cfg.Advertise, bind)
		if err != nil {
			return "", err
		}
		_, port, _ := net.SplitHostPort(bind)
		if actual != nil { // the real port when the flag said :0
			port = strconv.Itoa(actual.(*net.TCPAddr).Port)
		}
		return net.JoinHostPort(host, port), nil
	}
	var grpcAdv, httpAdv, raftAdv, gossipAdv string
	for _, a := range []struct {
		dst    *string
		bind   string
		actual net.Addr
	}{
		{&grpcAdv, cfg.GRPCAddr, grpcLis.Addr()},
		{&httpAdv, cfg.HTTPAddr, httpLis.Addr()},
		{&raftAdv, cfg.RaftAddr, nil},
		{&gossipAdv, cfg.GossipAddr, nil},
	} {
		if *a.dst, err = adv(a.bind, a.actual); err != nil {
			return err
		}
	}

	// Before the node opens, so Raft's first metrics are not lost.
	maxAhead := cluster.Config{Lead: cfg.Lead, MaxAhead: cfg.MaxAhead, MaxSkew: cfg.MaxSkew}.EffectiveMaxAhead()
	reg, err := newRegistry(cfg.MaxSkew, maxAhead)
	if err != nil {
		return err
	}
	events, err := newClusterEvents(reg)
	if err != nil {
		return err
	}
	forwarder := rpc.NewPeerForwarder(sec.peerDial...)
	defer forwarder.Close()
	// The leader adds, promotes and removes members only on what they answer
	// over this same authenticated link, never on gossip alone.
	prober := rpc.NewPeerProber(sec.peerDial...)
	node, err := cluster.Open(cluster.Config{
		Name:                 cfg.Name,
		DataDir:              cfg.DataDir,
		RaftAddr:             cfg.RaftAddr,
		RaftAdvertise:        raftAdv,
		GossipAddr:           cfg.GossipAddr,
		GossipAdvertise:      gossipAdv,
		GRPCAddr:             grpcAdv,
		HTTPAddr:             httpAdv,
		Join:                 cfg.Join,
		BootstrapExpect:      cfg.BootstrapExpect,
		Datacenter:           cfg.Datacenter,
		Layout:               cfg.Layout,
		Lead:                 cfg.Lead,
		MaxAhead:             cfg.MaxAhead,
		MaxSkew:              cfg.MaxSkew,
		ReapAfter:            cfg.ReapAfter,
		SnapshotThreshold:    cfg.SnapshotThreshold,
		SnapshotInterval:     cfg.SnapshotInterval,
		GossipLocal:          cfg.GossipProfile == "local",
		EnableFaultInjection: cfg.EnableFaultInjection,
		RaftTLS:              sec.raft,
		GossipKeys:           cfg.GossipKeys,
		GossipLabel:          gossipLabel(cfg.ClusterName),
		Forwarder:            forwarder,
		Prober:               prober,
		Events:               events,
		Logger:               log,
		Version:              buildinfo.Read().Version,
		Revision:             buildinfo.Read().Revision,
	})
	if errors.Is(err, cluster.ErrLayoutMismatch) {
		if rec, ok, _ := cluster.RecordedLayout(cfg.DataDir); ok {
			return fmt.Errorf("open node: %w; for idgend: drop --layout, --layout-unit and --layout-epoch, or give %s", err, layoutFlags(rec))
		}
	}
	if err != nil {
		return fmt.Errorf("open node: %w", err)
	}
	// Close is idempotent; after a Leave the node is already closed.
	defer node.Close()

	srv, err := rpc.NewServer(rpc.ServerConfig{
		Backend:     node,
		NodeName:    node.Name(),
		NodeID:      node.ID(),
		Logger:      log,
		BatchSize:   cfg.BatchSize,
		BufferDepth: cfg.BufferDepth,
		MaxCount:    cfg.MaxCount,
		Registerer:  reg,
		TLS:         sec.grpc,
		Bounds:      cfg.Bounds,
		ServerHost:  node.ServerHost,
		KnownHosts:  loadKnownHosts(cfg.DataDir, cfg.Bounds.KnownAddresses, log),
	})
	if err != nil {
		return err
	}
	// Every bound of the admin port is in admin.go.
	httpSrv := newAdminServer(rpc.NewAdminHandler(node, reg), log)

	errc := make(chan error, 2)
	go func() {
		if err := srv.Serve(grpcLis); err != nil {
			errc <- fmt.Errorf("grpc server: %w", err)
		}
	}()
	go func() {
		if err := httpSrv.Serve(limitAdmin(httpLis, log, srv.DoorRefused)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("http admin server: %w", err)
		}
	}()
	keepCtx, stopKeeping := context.WithCancel(context.Background())
	defer stopKeeping()
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		keepKnownHosts(keepCtx, cfg.DataDir, srv.KnownHosts, log)
	}()
	log.Info("idgend serving", "id", node.ID(), "name", node.Name(), "grpc", grpcLis.Addr().String(),
		"http", httpLis.Addr().String(), "advertise_grpc", grpcAdv, "data_dir", cfg.DataDir)

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("signal received; shutting down", "timeout", cfg.ShutdownTimeout)
	case <-srv.Left():
		log.Info("left the cluster; shutting down")
	case <-node.Done():
		log.Warn("node stopped; shutting down")
	case runErr = <-errc:
	}

	// Health goes NOT_SERVING and in-flight calls finish (bounded), then the
	// node stops. A Leave's response goes out during this graceful stop.
	srv.Shutdown(cfg.ShutdownTimeout)
	stopKeeping()
	<-kept
	if err := saveKnownHosts(cfg.DataDir, srv.KnownHosts()); err != nil {
		log.Warn("known hosts not saved", "dir", cfg.DataDir, "err", err)
	}
	hctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := httpSrv.Shutdown(hctx); err != nil {
		httpSrv.Close()
	}
	if err := node.Close(); err != nil {
		log.Warn("node close", "err", err)
	}
	log.Info("idgend stopped")
	return runErr
}

// check is --check: the configuration is valid and the certificate and
// key files load. Nothing is bound or written; the advertise host is not
// resolved, since its name may exist only where the node will run.
func check(cfg Config, log *slog.Logger, stdout, stderr io.Writer) int {
	if _, err := loadSecurity(cfg, log); err != nil {
		fmt.Fprintf(stderr, "idgend: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "idgend %s\n", buildinfo.Read())
	for _, s := range cfg.settings {
		fmt.Fprintln(stdout, s)
	}
	fmt.Fprintln(stdout, "configuration ok")
	return exitOK
}

// probePort checks that addr can be bound on network, then frees it.
func probePort(network, addr string) error {
	if network == "udp" {
		c, err := net.ListenPacket("udp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		return err
	}
	return l.Close()
}
