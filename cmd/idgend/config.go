package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	sockaddr "github.com/hashicorp/go-sockaddr"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/rpc"
	"github.com/idgen/idgen/rpc/tlsconf"
)

// envPrefix: every flag --some-flag can also be set as IDGEN_SOME_FLAG.
const envPrefix = "IDGEN_"

// Config is everything idgend reads from its flags and environment, validated
// once before anything is opened.
type Config struct {
	Name            string
	DataDir         string
	GRPCAddr        string
	RaftAddr        string
	GossipAddr      string
	HTTPAddr        string
	Advertise       string
	Join            []string
	BootstrapExpect int
	Datacenter      int
	// Layout is the ID layout a cluster this node founds gets (--layout,
	// --layout-unit, --layout-epoch); zero when none of them is set: the
	// default for a new cluster, the cluster's for a node that joins or
	// restarts. A layout set here that differs from the cluster's is refused.
	Layout generator.Layout

	Lead        time.Duration
	MaxAhead    time.Duration
	MaxSkew     time.Duration
	ReapAfter   time.Duration
	BatchSize   int
	BufferDepth int
	MaxCount    int
	// Bounds are the gRPC port's bounds by who is asking (--grpc-max-*).
	Bounds            rpc.Bounds
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration

	// TLS is the node's server certificate, key and the cluster CA: all
	// three or none. It secures gRPC (mutual, roles per call) and Raft.
	TLS tlsconf.Files
	// GossipKeys encrypt gossip; the first one encrypts, all decrypt.
	GossipKeys [][]byte
	// ClusterName labels gossip so that deployments on one network stay apart.
	ClusterName string
	// Insecure allows plaintext on non-loopback addresses.
	Insecure bool

	GossipProfile        string
	EnableFaultInjection bool
	ShutdownTimeout      time.Duration
	LogFormat            string
	LogLevel             slog.Level

	// gossipKeyInArgs: --gossip-key came from the command line, where every
	// user of the host can read it (ps); loadSecurity warns.
	gossipKeyInArgs bool
	// bindNames are the bind flags given as host names, with the name: the
	// addresses above hold the IP each resolved to.
	bindNames map[string]string

	// ShowVersion (--version) prints the build and exits.
	ShowVersion bool
	// CheckOnly (--check) validates flags, environment and the TLS and
	// gossip key files, prints the resolved settings and exits.
	CheckOnly bool
	// settings is every flag's resolved value, for --check.
	settings []string
}

// errUsage marks configuration errors: the process exits 2 for them.
var errUsage = errors.New("usage")

// oneShot flags make idgend do something else than serve; the environment
// never sets them, or a stray IDGEN_CHECK would keep every node from starting.
var oneShot = map[string]bool{"version": true, "check": true}

// secretFlags are not printed by --check.
var secretFlags = map[string]bool{"gossip-key": true}

// maxBufferDepth bounds the prefetch buffer: memory stays bounded.
const maxBufferDepth = 1024

// parseConfig reads flags from args over IDGEN_* values from getenv (flags
// win) and validates the result. Errors wrap errUsage; flag.ErrHelp is
// returned as is.
func parseConfig(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	var c Config
	var join, logLevel, gossipKeyFile string
	var layoutBits, layoutEpoch string
	var layoutUnit time.Duration
	// The environment is applied first; parsingArgs tells gossipKey's Set
	// that the command line is setting it now.
	var parsingArgs bool
	gossipKey := &argString{parsingArgs: &parsingArgs}
	fs := flag.NewFlagSet("idgend", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.Name, "name", "", "human label for this node (default: the first 8 characters of its ID)")
	fs.StringVar(&c.DataDir, "data-dir", "./data", "directory for the node ID, Raft log and snapshots")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", "127.0.0.1:50051", "gRPC bind address (IDService, ClusterService, health, reflection); a host name must resolve to one IP")
	fs.StringVar(&c.RaftAddr, "raft-addr", "127.0.0.1:50052", "Raft TCP bind address")
	fs.StringVar(&c.GossipAddr, "gossip-addr", "127.0.0.1:7946", "gossip (memberlist) bind address, TCP and UDP")
	fs.StringVar(&c.HTTPAddr, "http-addr", "127.0.0.1:9090", "HTTP admin bind address (/healthz, /readyz, /metrics; plaintext, read-only)")
	fs.StringVar(&c.Advertise, "advertise", "", "host other nodes use to reach this one (default: the bind host if it is an IP, else the first private IPv4, else 127.0.0.1)")
	fs.StringVar(&join, "join", "", "comma-separated gossip addresses (host:port) of other nodes; retried periodically")
	fs.IntVar(&c.BootstrapExpect, "bootstrap-expect", 1, "number of fresh nodes that form a new cluster together (1..8)")
	fs.IntVar(&c.Datacenter, "datacenter", -1, "preferred datacenter for this node's slot (0..3 in the default layout), -1 for any")
	fs.StringVar(&layoutBits, "layout", "", "ID layout of a cluster this node founds: `ts/dc/m/seq` bits, such as 28/2/1/11 (the default) or 35/2/1/11 with --layout-unit 10ms; "+
		"unset, a node that joins or restarts takes its cluster's, and one set otherwise than the cluster's is refused (idctl layout shows a layout's rate, lifetime and code length)")
	fs.DurationVar(&layoutUnit, "layout-unit", generator.DefaultUnit, "with --layout: the unit the timestamp counts, 1ms..1s")
	fs.StringVar(&layoutEpoch, "layout-epoch", generator.DefaultLayout().EpochTime().Format("2006-01-02"),
		"with --layout: the timestamp's zero, a past `date` (2026-05-05), RFC 3339 time or Unix seconds")
	fs.DurationVar(&c.Lead, "lead", cluster.DefaultLead, "how far ahead of its issuing point a node keeps its granted window")
	fs.DurationVar(&c.MaxAhead, "max-ahead", 0, "cap on a window's end beyond the cluster's time, the quorum-th latest of the voters' clocks (0 = lead + max-skew)")
	fs.DurationVar(&c.MaxSkew, "max-skew", cluster.DefaultMaxSkew, "largest difference between a node's clock (or the leader's) and the cluster's time before it is refused (a leader hands off)")
	fs.DurationVar(&c.ReapAfter, "reap-after", cluster.DefaultReapAfter, "how long a node may be dead before its slot is freed")
	fs.IntVar(&c.BatchSize, "batch-size", rpc.DefaultBatchSize, "IDs per prefetched batch, served for count 0")
	fs.IntVar(&c.BufferDepth, "buffer-depth", rpc.DefaultBufferDepth, "prefetched batches kept ready")
	fs.IntVar(&c.MaxCount, "max-count", rpc.DefaultMaxCount, "largest count one GetIDBatch call may ask for")
	d := rpc.DefaultBounds
	fs.IntVar(&c.Bounds.Handshakes, "grpc-max-handshakes", d.Handshakes, "gRPC connections in their TLS handshake at once; a new one past it closes a silent one of the address holding the most (if more than its own), else it is closed at once")
	fs.IntVar(&c.Bounds.HandshakesPerAddress, "grpc-max-handshakes-per-address", d.HandshakesPerAddress, "of them, from one remote address; a new one past it closes that address's oldest silent one, else it is closed at once")
	fs.IntVar(&c.Bounds.PeerHandshakes, "grpc-max-peer-handshakes", d.PeerHandshakes, "more gRPC handshakes at once from the hosts of the cluster's servers (by their advertised addresses): places no stranger takes")
	fs.IntVar(&c.Bounds.KnownHandshakes, "grpc-max-known-handshakes", d.KnownHandshakes, "more gRPC handshakes at once from hosts whose handshake succeeded in the last hour: places no stranger takes")
	fs.IntVar(&c.Bounds.KnownAddresses, "grpc-known-addresses", d.KnownAddresses, "hosts whose handshake succeeded the node remembers for --grpc-max-known-handshakes (the least lately seen forgotten first)")
	fs.IntVar(&c.Bounds.ClientConns, "grpc-max-client-conns", d.ClientConns, "gRPC connections of clients and admins (everyone, without TLS) open at once; one past it is refused")
	fs.IntVar(&c.Bounds.ConnsPerIdentity, "grpc-max-conns-per-identity", d.ConnsPerIdentity, "of them, per certificate identity (role and name; without TLS, per remote address)")
	fs.IntVar(&c.Bounds.PeerConns, "grpc-max-peer-conns", d.PeerConns, "gRPC connections of the cluster's servers (role server): a room of their own that clients and strangers never fill")
	fs.IntVar(&c.Bounds.AdminConns, "grpc-max-admin-conns", d.AdminConns, "gRPC connections of operators (role admin): a room of their own that clients and strangers never fill")
	fs.IntVar(&c.Bounds.CallsPerIdentity, "grpc-max-calls-per-identity", d.CallsPerIdentity, "unary calls in flight one identity may hold on the node (a call waiting for a batch holds memory until its deadline)")
	fs.IntVar(&c.Bounds.Calls, "grpc-max-calls", d.Calls, "unary calls in flight on the node in all")
	fs.IntVar(&c.Bounds.IDsPerIdentity, "grpc-max-ids-per-identity", d.IDsPerIdentity, "IDs one certificate identity (without TLS, one remote address) may draw from the node a second; a call past it is refused with RESOURCE_EXHAUSTED (0: no bound)")
	fs.IntVar(&c.Bounds.StreamsPerIdentity, "grpc-max-streams-per-identity", d.StreamsPerIdentity, "streaming calls other than the health check one identity may hold open (each connection also gets 2 health watches of its own)")
	fs.Uint64Var(&c.SnapshotThreshold, "snapshot-threshold", 0, "Raft log entries between snapshots (0 = Raft's default)")
	fs.DurationVar(&c.SnapshotInterval, "snapshot-interval", 0, "how often Raft checks whether to snapshot (0 = Raft's default, 120s)")
	fs.StringVar(&c.TLS.Cert, "tls-cert", "", "this node's server certificate (PEM; idctl tls cert create --role server); with --tls-key and --tls-ca")
	fs.StringVar(&c.TLS.Key, "tls-key", "", "the certificate's private key (PEM; readable by its owner only, mode 0600)")
	fs.StringVar(&c.TLS.CA, "tls-ca", "", "the cluster CA (PEM): callers and Raft peers must show a certificate it signed")
	fs.Var(gossipKey, "gossip-key", "base64 gossip encryption `key` of 16, 24 or 32 bytes (idctl keygen); a comma list while rotating: the first encrypts, all decrypt. "+
		"On the command line every user of the host sees it (ps): prefer --gossip-key-file or IDGEN_GOSSIP_KEY")
	fs.StringVar(&gossipKeyFile, "gossip-key-file", "", "file holding the gossip key(s), one per line or comma-separated (instead of --gossip-key); mode 0600 (idctl keygen --out FILE)")
	fs.StringVar(&c.ClusterName, "cluster-name", "idgen", "deployment name; gossip carries it as a label, so clusters of other names on the network are never heard")
	fs.BoolVar(&c.Insecure, "insecure", false, "allow plaintext gRPC, Raft and gossip on non-loopback addresses (anyone who reaches the ports owns the cluster)")
	fs.StringVar(&c.GossipProfile, "gossip-profile", "lan", "memberlist timing profile: lan, or local for one host (tests)")
	fs.BoolVar(&c.EnableFaultInjection, "enable-fault-injection", false, "allow ClusterService.Fault to move this node's clock (chaos tests only)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 5*time.Second, "bounded wait for in-flight calls on SIGINT/SIGTERM")
	fs.StringVar(&c.LogFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&c.ShowVersion, "version", false, "print the version, VCS revision and Go version, then exit")
	fs.BoolVar(&c.CheckOnly, "check", false, "validate flags, environment, TLS files and gossip key, print the resolved settings, then exit (0 when valid)")
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: idgend [flags]\n\nEvery flag can also be set in the environment as IDGEN_<FLAG>, dashes as\nunderscores (IDGEN_DATA_DIR=/var/lib/idgen); a flag on the command line wins.\n\nFlags:\n")
		fs.PrintDefaults()
	}

	// Environment first, so that flags parsed afterwards override it.
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		key := envKey(f.Name)
		v := getenv(key)
		if v == "" || envErr != nil || oneShot[f.Name] {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			envErr = fmt.Errorf("%w: environment %s=%q: %v", errUsage, key, v, err)
		}
	})
	if envErr != nil {
		return c, envErr
	}
	parsingArgs = true
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("%w: unexpected arguments %q (idgend takes flags only)", errUsage, fs.Args())
	}
	if c.ShowVersion {
		return c, nil
	}
	fs.VisitAll(func(f *flag.Flag) {
		if oneShot[f.Name] {
			return
		}
		v := f.Value.String()
		if secretFlags[f.Name] && v != "" {
			v = "(set, not shown)"
		}
		from := "default"
		if v != f.DefValue {
			from = "set"
		}
		c.settings = append(c.settings, fmt.Sprintf("--%s=%s\t(%s)", f.Name, v, from))
	})
	for _, a := range strings.Split(join, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.Join = append(c.Join, a)
		}
	}
	if err := c.readLayout(fs, layoutBits, layoutUnit, layoutEpoch); err != nil {
		return c, fmt.Errorf("%w: %v", errUsage, err)
	}
	c.gossipKeyInArgs = gossipKey.fromArgs && gossipKey.value != ""
	if err := c.readGossipKeys(gossipKey.value, gossipKeyFile); err != nil {
		return c, fmt.Errorf("%w: %v", errUsage, err)
	}
	if err := c.LogLevel.UnmarshalText([]byte(logLevel)); err != nil {
		return c, fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", errUsage, logLevel)
	}
	if err := c.validate(); err != nil {
		return c, fmt.Errorf("%w: %v", errUsage, err)
	}
	if c.Layout == (generator.Layout{}) {
		c.settings = append(c.settings, fmt.Sprintf("layout %s for a cluster this node founds; joining or restarting, the cluster's", c.bootstrapLayout()))
	} else {
		c.settings = append(c.settings, fmt.Sprintf("layout %s for a cluster this node founds; joining or restarting, the cluster's must be the same", c.Layout))
	}
	for _, b := range c.binds() {
		if name, ok := c.bindNames[b.flag]; ok {
			c.settings = append(c.settings, fmt.Sprintf("%s %s binds %s", b.flag, name, *b.addr))
		}
	}
	return c, nil
}

// readLayout builds Layout from --layout, --layout-unit and --layout-epoch
// when any of them is set (on the command line or in the environment). The
// layout must be fit to found a cluster with (generator's CheckNew) unless
// the data dir already records it as its cluster's: an old cluster's layout
// may be within a year of its end (the IdgenLayoutEndsWithinAYear alert).
func (c *Config) readLayout(fs *flag.FlagSet, bits string, unit time.Duration, epoch string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["layout"] && !set["layout-unit"] && !set["layout-epoch"] {
		return nil
	}
	if !set["layout"] {
		return errors.New("--layout-unit and --layout-epoch need --layout, the layout's bits (such as --layout 35/2/1/11 --layout-unit 10ms)")
	}
	spec := fmt.Sprintf("--layout %s --layout-unit %s --layout-epoch %s", bits, unit, epoch)
	ts, dc, m, seq, err := generator.ParseBits(bits)
	if err != nil {
		return fmt.Errorf("--layout %q: %v", bits, strings.TrimPrefix(err.Error(), generator.ErrInvalidLayout.Error()+": "))
	}
	e, err := generator.ParseEpoch(epoch)
	if err != nil {
		return fmt.Errorf("--layout-epoch %q: want Unix seconds, a date (2026-05-05) or an RFC 3339 time (2026-05-05T00:00:00Z)", epoch)
	}
	l := generator.Layout{Epoch: e, Unit: unit, TimestampBits: ts, DatacenterBits: dc, MachineBits: m, SequenceBits: seq}
	if rec, ok, err := cluster.RecordedLayout(c.DataDir); c.DataDir != "" && err == nil && ok && rec == l {
		c.Layout = l
		return nil
	}
	if err := l.CheckNew(time.Now()); err != nil {
		return fmt.Errorf("%s: %v (idctl layout shows what a layout gives)", spec,
			strings.TrimPrefix(err.Error(), generator.ErrInvalidLayout.Error()+": "))
	}
	c.Layout = l
	return nil
}

// layoutFlags are the flags that ask for l.
func layoutFlags(l generator.Layout) string {
	return fmt.Sprintf("--layout %d/%d/%d/%d --layout-unit %s --layout-epoch %s", l.TimestampBits, l.DatacenterBits, l.MachineBits, l.SequenceBits,
		l.Unit, l.EpochTime().Format(time.RFC3339))
}

// bootstrapLayout is the layout a cluster this node founds gets.
func (c *Config) bootstrapLayout() generator.Layout {
	if c.Layout == (generator.Layout{}) {
		return generator.DefaultLayout()
	}
	return c.Layout
}

// argString is a string flag that knows whether the command line set it
// (the environment sets flags through the same Set, before parsing).
type argString struct {
	value       string
	fromArgs    bool
	parsingArgs *bool
}

func (s *argString) String() string {
	if s == nil {
		return ""
	}
	return s.value
}

func (s *argString) Set(v string) error {
	s.value = v
	if s.parsingArgs != nil && *s.parsingArgs {
		s.fromArgs = true
	}
	return nil
}

// readGossipKeys decodes --gossip-key or the content of --gossip-key-file.
func (c *Config) readGossipKeys(key, file string) error {
	if key != "" && file != "" {
		return errors.New("--gossip-key and --gossip-key-file: give one of them")
	}
	if file != "" {
		b, err := readSecretFile("--gossip-key-file", file)
		if err != nil {
			return err
		}
		key = strings.Join(strings.Fields(strings.ReplaceAll(string(b), ",", " ")), ",")
		if key == "" {
			return fmt.Errorf("--gossip-key-file %s is empty", file)
		}
	}
	if key == "" {
		return nil
	}
	keys, err := cluster.ParseGossipKeys(key)
	if err != nil {
		return fmt.Errorf("--gossip-key: %v", err)
	}
	c.GossipKeys = keys
	return nil
}

// secure reports whether every link a remote peer could use is protected:
// gRPC and Raft by TLS, gossip by a key.
func (c *Config) secure() bool { return c.TLS.Enabled() && len(c.GossipKeys) > 0 }

// checkExposure refuses plaintext on an address other hosts can reach,
// unless --insecure: anyone who reaches such a port owns the cluster. It
// judges the resolved binds, the very IPs the listeners get.
func (c *Config) checkExposure() error {
	if c.secure() || c.Insecure {
		return nil
	}
	for _, b := range c.binds() {
		if !loopback(*b.addr) {
			shown := *b.addr
			if name, ok := c.bindNames[b.flag]; ok {
				shown = fmt.Sprintf("%s (%s)", name, *b.addr)
			}
			return fmt.Errorf("%s %s is not a loopback address, and without --tls-cert, --tls-key, --tls-ca and --gossip-key anyone who reaches it owns the cluster; "+
				"set them (idctl tls, idctl keygen), bind 127.0.0.1, or pass --insecure to accept plaintext", b.flag, shown)
		}
	}
	return nil
}

// bind is one listener's flag and its address in the Config.
type bind struct {
	flag string
	addr *string
}

func (c *Config) binds() []bind {
	return []bind{{"--grpc-addr", &c.GRPCAddr}, {"--raft-addr", &c.RaftAddr}, {"--gossip-addr", &c.GossipAddr}, {"--http-addr", &c.HTTPAddr}}
}

// resolveBinds replaces each bind host name by the one IP it resolves to,
// once, before the exposure check: the listeners then bind exactly the IP
// the check judged. (Handed a name, memberlist cannot parse it and binds
// every interface, TCP and UDP; a later lookup could also answer otherwise.)
func (c *Config) resolveBinds() error {
	for _, b := range c.binds() {
		r, err := resolveBind(*b.addr)
		if err != nil {
			return fmt.Errorf("%s %q: %v", b.flag, *b.addr, err)
		}
		if r != *b.addr {
			if c.bindNames == nil {
				c.bindNames = map[string]string{}
			}
			c.bindNames[b.flag] = *b.addr
			*b.addr = r
		}
	}
	return nil
}

// resolveBind turns host:port into IP:port. An IP stays as it is and an
// empty host (every interface) stays empty. A name must resolve to exactly
// one IP, or to loopback IPs only (localhost: 127.0.0.1 and ::1), of which
// the IPv4 one is taken, as the standard library's Listen would.
func resolveBind(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if host == "" {
		return addr, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return "", fmt.Errorf("zoned address %s: memberlist cannot bind a zone; bind a loopback or global IP", host)
		}
		return addr, nil
	}
	found, err := lookupIP(host)
	if err != nil {
		return "", fmt.Errorf("%s does not resolve: %v", host, err)
	}
	var ips []net.IP
	loop := true
	for _, ip := range found {
		if !slices.ContainsFunc(ips, ip.Equal) {
			ips = append(ips, ip)
			loop = loop && ip.IsLoopback()
		}
	}
	switch {
	case len(ips) == 0:
		return "", fmt.Errorf("%s does not resolve to any address", host)
	case len(ips) == 1:
		return net.JoinHostPort(ips[0].String(), port), nil
	case loop:
		i := max(slices.IndexFunc(ips, func(ip net.IP) bool { return ip.To4() != nil }), 0)
		return net.JoinHostPort(ips[i].String(), port), nil
	}
	names := make([]string, len(ips))
	for i, ip := range ips {
		names[i] = ip.String()
	}
	return "", fmt.Errorf("%s resolves to %d addresses (%s), and a listener binds one: give one IP (or a name with a single address)",
		host, len(ips), strings.Join(names, ", "))
}

// loopback: the bind host is a loopback IP. Binds are resolved first
// (resolveBinds), so a name is never judged here; an empty host binds every
// interface.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// lookupIP resolves bind host names; tests replace it.
var lookupIP = net.LookupIP

// clusterNameRE: the name is a gossip label (memberlist allows 255 bytes).
var clusterNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

func envKey(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// validate checks every value with the flag's name in the message. The
// cluster and rpc packages validate again; these messages name the flags.
func (c *Config) validate() error {
	layout := c.bootstrapLayout()
	if c.DataDir == "" {
		return errors.New("--data-dir must not be empty")
	}
	for _, a := range []struct {
		flag, addr string
		zeroPort   bool
	}{
		{"--grpc-addr", c.GRPCAddr, true},
		{"--http-addr", c.HTTPAddr, true},
		// Raft and gossip advertise their port to others, so it must be known.
		{"--raft-addr", c.RaftAddr, false},
		{"--gossip-addr", c.GossipAddr, false},
	} {
		if err := checkBindAddr(a.addr, a.zeroPort); err != nil {
			return fmt.Errorf("%s %q: %v", a.flag, a.addr, err)
		}
	}
	if err := c.resolveBinds(); err != nil {
		return err
	}
	if c.Advertise != "" {
		if strings.Contains(c.Advertise, ":") && net.ParseIP(c.Advertise) == nil {
			return fmt.Errorf("--advertise %q: want a host or IP without a port", c.Advertise)
		}
	}
	for _, j := range c.Join {
		if _, _, err := net.SplitHostPort(j); err != nil {
			return fmt.Errorf("--join %q: want host:port of another node's --gossip-addr: %v", j, err)
		}
	}
	if c.BootstrapExpect < 1 || c.BootstrapExpect > layout.Slots() {
		return fmt.Errorf("--bootstrap-expect %d out of range 1..%d", c.BootstrapExpect, layout.Slots())
	}
	// Checked against the layout this node would found a cluster with: a
	// node joining a cluster of more datacenters gives its --layout.
	if dcs := 1 << layout.DatacenterBits; c.Datacenter < -1 || c.Datacenter >= dcs {
		return fmt.Errorf("--datacenter %d out of range -1..%d (layout %s; a cluster of another layout: give its --layout)", c.Datacenter, dcs-1, layout)
	}
	if c.Lead < layout.Unit {
		return fmt.Errorf("--lead %s must be at least one layout unit (%s)", c.Lead, layout.Unit)
	}
	if c.MaxSkew <= 0 {
		return fmt.Errorf("--max-skew %s must be positive", c.MaxSkew)
	}
	if c.MaxAhead < 0 || (c.MaxAhead > 0 && c.MaxAhead < c.Lead) {
		return fmt.Errorf("--max-ahead %s must be 0 (lead + max-skew) or at least --lead %s", c.MaxAhead, c.Lead)
	}
	if c.ReapAfter < time.Second {
		return fmt.Errorf("--reap-after %s must be at least 1s", c.ReapAfter)
	}
	for _, b := range []struct {
		flag string
		v    int
	}{
		{"--grpc-max-handshakes", c.Bounds.Handshakes}, {"--grpc-max-handshakes-per-address", c.Bounds.HandshakesPerAddress},
		{"--grpc-max-peer-handshakes", c.Bounds.PeerHandshakes}, {"--grpc-max-known-handshakes", c.Bounds.KnownHandshakes},
		{"--grpc-known-addresses", c.Bounds.KnownAddresses},
		{"--grpc-max-client-conns", c.Bounds.ClientConns}, {"--grpc-max-conns-per-identity", c.Bounds.ConnsPerIdentity},
		{"--grpc-max-peer-conns", c.Bounds.PeerConns}, {"--grpc-max-admin-conns", c.Bounds.AdminConns},
		{"--grpc-max-streams-per-identity", c.Bounds.StreamsPerIdentity},
		{"--grpc-max-calls-per-identity", c.Bounds.CallsPerIdentity}, {"--grpc-max-calls", c.Bounds.Calls},
	} {
		if b.v < 1 {
			return fmt.Errorf("%s %d, want at least 1", b.flag, b.v)
		}
	}
	if c.Bounds.IDsPerIdentity < 0 {
		return fmt.Errorf("--grpc-max-ids-per-identity %d, want 0 (no bound) or more", c.Bounds.IDsPerIdentity)
	}
	if c.MaxCount < 1 || c.MaxCount > generator.MaxBatch {
		return fmt.Errorf("--max-count %d out of range 1..%d", c.MaxCount, generator.MaxBatch)
	}
	if c.BatchSize < 1 || c.BatchSize > c.MaxCount {
		return fmt.Errorf("--batch-size %d out of range 1..%d (--max-count)", c.BatchSize, c.MaxCount)
	}
	if c.BufferDepth < 1 || c.BufferDepth > maxBufferDepth {
		return fmt.Errorf("--buffer-depth %d out of range 1..%d", c.BufferDepth, maxBufferDepth)
	}
	if c.GossipProfile != "lan" && c.GossipProfile != "local" {
		return fmt.Errorf("--gossip-profile %q: want lan or local", c.GossipProfile)
	}
	if c.SnapshotInterval < 0 {
		return fmt.Errorf("--snapshot-interval %s must not be negative", c.SnapshotInterval)
	}
	if c.ShutdownTimeout <= 0 {
		return fmt.Errorf("--shutdown-timeout %s must be positive", c.ShutdownTimeout)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return fmt.Errorf("--log-format %q: want text or json", c.LogFormat)
	}
	if err := c.TLS.Check(); err != nil {
		return fmt.Errorf("--tls-cert, --tls-key, --tls-ca: %v", err)
	}
	if !clusterNameRE.MatchString(c.ClusterName) {
		return fmt.Errorf("--cluster-name %q: want 1-64 letters, digits, dots, dashes or underscores", c.ClusterName)
	}
	return c.checkExposure()
}

func checkBindAddr(addr string, zeroPortOK bool) error {
	_, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port or :port: %v", err)
	}
	p, err := strconv.Atoi(ps)
	if err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("port %q is not a number in 0..65535", ps)
	}
	if p == 0 && !zeroPortOK {
		return errors.New("port 0 is not allowed here: other nodes must know the port")
	}
	return nil
}

// advertiseHost picks the host other nodes use for an address bound to
// bindAddr: --advertise if set, the bind host if it is a specific IP, else
// the first private IPv4, else loopback. Names are resolved to an IP because
// memberlist advertises IPs only.
func advertiseHost(advertise, bindAddr string) (string, error) {
	if advertise != "" {
		if net.ParseIP(advertise) != nil {
			return advertise, nil
		}
		ips, err := net.LookupIP(advertise)
		if err != nil || len(ips) == 0 {
			return "", fmt.Errorf("--advertise %q does not resolve: %v", advertise, err)
		}
		for _, ip := range ips {
			if ip.To4() != nil {
				return ip.String(), nil
			}
		}
		return ips[0].String(), nil
	}
	host, _, _ := net.SplitHostPort(bindAddr)
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		return ip.String(), nil
	}
	if host != "" && net.ParseIP(host) == nil { // a name such as localhost
		if ips, err := net.LookupIP(host); err == nil {
			for _, ip := range ips {
				if ip.To4() != nil {
					return ip.String(), nil
				}
			}
		}
	}
	if ip := privateIPv4(); ip != "" {
		return ip, nil
	}
	return "127.0.0.1", nil
}

// privateIPv4 is the first private IPv4 address with a default route, as
// go-sockaddr's GetPrivateIP finds it but without IPv6 (which it may prefer).
func privateIPv4() string {
	ifs, err := sockaddr.GetPrivateInterfaces()
	if err != nil {
		return ""
	}
	v4, _ := sockaddr.FilterIfByType(ifs, sockaddr.TypeIPv4)
	if len(v4) == 0 {
		return ""
	}
	return (*sockaddr.ToIPAddr(v4[0].SockAddr)).NetIP().String()
}

// newLogger builds the process logger from --log-format and --log-level.
func newLogger(c Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.LogLevel}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// osEnv is getenv for the real process.
func osEnv(k string) string { return os.Getenv(k) }
