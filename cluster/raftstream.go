package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/door"
)

// Raft connections start with a one-line greeting that names the dialer's
// cluster. hashicorp/raft's RPCs do not name the server they are meant for,
// so without it a leader still dialling a wiped node's old Raft address
// would append its log to whatever new cluster now listens there (a wiped
// seed that bootstrapped alone), mixing two clusters' slots.
const (
	raftGreeting    = "IDGEN-RAFT/1 cluster="
	maxGreetingLine = 128
)

// The Raft port's bounds (cmd/idgend/README.md, "Securing a cluster"). hashicorp/raft
// gives every accepted connection a goroutine and a 256 KiB read buffer
// before it reads a byte, so nothing reaches it before the TLS handshake and
// the greeting are done: they run in the listener's Accept (door.Gate).
const (
	// raftHandshakeTimeout bounds the TLS handshake and the greeting
	// together, from accept; a peer of the cluster needs milliseconds.
	raftHandshakeTimeout = 5 * time.Second
	// raftMaxPending is how many handshakes may run at once; a new
	// connection past it closes the oldest unfinished one.
	raftMaxPending = 64
	// raftServerPending is how many more may run from the hosts of the
	// log's members, and as many from hosts whose handshake succeeded in
	// the last hour (raftRemember of them): places a stranger flooding
	// the port from any number of addresses cannot take.
	raftServerPending = 16
	raftRemember      = 256
	// raftMaxConns caps the port's open connections, handshaking or not.
	// A peer keeps a few to each server (a pool of 3, the pipeline, a
	// snapshot); 256 is room for dozens of nodes.
	raftMaxConns = 256
)

// errOtherCluster: a Raft connection from a member of another cluster.
var errOtherCluster = errors.New("raft connection from another cluster refused")

// errNoGreeting: a Raft connection whose first line is not our greeting.
var errNoGreeting = errors.New("sent no idgen Raft greeting")

// errRaftTLS: the TLS handshake of an accepted Raft connection failed.
var errRaftTLS = errors.New("raft TLS handshake failed")

// rawStream is the Raft wire under the greeting: plain TCP or TLS. Its
// Accept returns raw TCP connections, secure runs the server side of the
// wire's handshake on one (under the gate's deadline), and Addr is the
// advertised address. Only clusterStreamLayer uses it.
type rawStream interface {
	net.Listener
	Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error)
	secure(net.Conn) (net.Conn, error)
}

// tcpStreamLayer is plain Raft TCP (as raft.NewTCPTransport builds it), so the
// greeting can wrap it like the TLS layer.
type tcpStreamLayer struct {
	net.Listener
	advertise net.Addr
}

func newTCPStreamLayer(bind string, advertise net.Addr) (*tcpStreamLayer, error) {
	l, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	if advertise == nil {
		advertise = l.Addr()
	}
	if a, ok := advertise.(*net.TCPAddr); !ok || a.IP == nil || a.IP.IsUnspecified() {
		l.Close()
		return nil, fmt.Errorf("raft advertise address %v is not one others can dial", advertise)
	}
	return &tcpStreamLayer{Listener: l, advertise: advertise}, nil
}

func (s *tcpStreamLayer) Addr() net.Addr { return s.advertise }

func (s *tcpStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(address), timeout)
}

func (s *tcpStreamLayer) secure(c net.Conn) (net.Conn, error) { return c, nil }

// raftGreeter is what the greeting needs to know of its node: own is the
// cluster ID it greets with ("" while it has none), alone whether it founds
// a cluster of its own (a lone seed), and so takes no other cluster's log.
type raftGreeter struct {
	own   func() string
	alone func() bool
	// servers names the hosts of the log's members: their handshakes
	// have places of their own (raftServerPending).
	servers func(host string) bool
}

// admits decides whether a Raft connection greeted with cluster theirs may
// reach this node's Raft, and whether that answer is final. A node with a
// cluster admits exactly its own cluster: an empty greeting (a node with no
// cluster) is never let into a cluster that has one, since any server
// certificate of the CA could send it. A node with none yet admits the
// leader that adds it (any ID) and fellow founders (empty), but a lone seed
// only fellow nodes without a cluster, so an old cluster's leader still
// dialling its Raft address cannot capture it. Until the answer is final
// (the node has a cluster) it is asked again on every read.
func admits(ours, theirs string, alone bool) (ok, final bool) {
	switch {
	case ours != "":
		return theirs == ours, true
	case alone:
		return theirs == "", false
	}
	return true, false
}

// clusterStreamLayer greets every dialled connection with this node's
// cluster ID and hands Raft only accepted connections that finished the
// wire's handshake and a greeting the node admits, within
// raftHandshakeTimeout; the rest are closed. A connection admitted before
// the node had a cluster is checked again on every read until it has one,
// and closed if it no longer passes.
type clusterStreamLayer struct {
	stream   rawStream
	gate     *door.Gate
	greeter  raftGreeter
	refusals *door.RateLog // one line per peer and kind a minute
	counts   *door.Counts  // refusals by bound, for idgen_door_refused_total
}

// The Raft port's bounds, as idgen_door_refused_total names them.
const (
	boundRaftConns        = "raft_conns"
	boundRaftHandshakes   = "raft_handshakes"
	boundRaftTimeout      = "raft_handshake_timeout"
	boundRaftTLS          = "raft_tls"
	boundRaftGreeting     = "raft_greeting"
	boundRaftOtherCluster = "raft_other_cluster"
)

var _ raft.StreamLayer = (*clusterStreamLayer)(nil)

func newClusterStreamLayer(stream rawStream, greeter raftGreeter, counts *door.Counts, logger *slog.Logger) *clusterStreamLayer {
	if greeter.alone == nil {
		greeter.alone = func() bool { return false }
	}
	if greeter.servers == nil {
		greeter.servers = func(string) bool { return false }
	}
	s := &clusterStreamLayer{stream: stream, greeter: greeter, refusals: door.NewRateLog(logger, 0), counts: counts}
	s.gate = door.NewGate(door.Limit(stream, raftMaxConns, s.refused), s.handshake, door.GateConfig{
		Timeout:    raftHandshakeTimeout,
		MaxPending: raftMaxPending,
		Rooms: []door.Room{
			{Max: raftServerPending, Has: greeter.servers},
			{Max: raftServerPending, Proven: true},
		},
		Remember: raftRemember,
		Refused:  s.refused,
		AcceptError: func(err error) {
			s.refusals.Log(slog.LevelError, "accept", "", "raft port cannot accept connections", "err", err)
		},
	})
	return s
}

// Accept returns the next connection that finished its handshake.
func (s *clusterStreamLayer) Accept() (net.Conn, error) { return s.gate.Accept() }

// Close closes the listener and every connection still in its handshake.
func (s *clusterStreamLayer) Close() error { return s.gate.Close() }

// Addr is the advertised address: Raft hands it to peers.
func (s *clusterStreamLayer) Addr() net.Addr { return s.stream.Addr() }

func (s *clusterStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := s.stream.Dial(address, timeout)
	if err != nil {
		return nil, err
	}
	_ = c.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintf(c, "%s%s\n", raftGreeting, s.greeter.own()); err != nil {
		c.Close()
		return nil, fmt.Errorf("raft greeting to %s: %w", address, err)
	}
	_ = c.SetWriteDeadline(time.Time{})
	return c, nil
}

// handshake runs in door.Gate, under its deadline: the TLS handshake (if
// any), then the greeting.
func (s *clusterStreamLayer) handshake(raw net.Conn) (net.Conn, error) {
	c, err := s.stream.secure(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errRaftTLS, err)
	}
	return s.checkGreeting(c)
}

// checkGreeting reads the peer's greeting line; the connection it returns
// hands Raft whatever the peer sent after it.
func (s *clusterStreamLayer) checkGreeting(c net.Conn) (net.Conn, error) {
	r := bufio.NewReaderSize(c, 2*maxGreetingLine)
	var line []byte
	for len(line) <= maxGreetingLine {
		b, err := r.ReadByte()
		if err != nil {
			return nil, fmt.Errorf("raft greeting from %s: %w", c.RemoteAddr(), err)
		}
		if b == '\n' {
			break
		}
		line = append(line, b)
	}
	theirs, ok := strings.CutPrefix(string(line), raftGreeting)
	if !ok || len(line) > maxGreetingLine {
		return nil, fmt.Errorf("%w: %s %w", errOtherCluster, c.RemoteAddr(), errNoGreeting)
	}
	g := &greetedConn{Conn: c, r: r, theirs: theirs, layer: s}
	if err := g.check(); err != nil {
		return nil, err
	}
	return g, nil
}

// otherClusterError is a greeting that names another cluster.
type otherClusterError struct{ remote, theirs, ours string }

func (e *otherClusterError) Error() string {
	return fmt.Sprintf("%v: %s belongs to cluster %s, this node to %s", errOtherCluster, e.remote, orNone(e.theirs), orNone(e.ours))
}

// orNone names an empty cluster ID in a message.
func orNone(id string) string {
	if id == "" {
		return "none"
	}
	return id
}

func (e *otherClusterError) Unwrap() error { return errOtherCluster }

// refused logs a refused Raft connection, at most once a minute per peer
// and kind (door.RateLog), with the count of the rest.
func (s *clusterStreamLayer) refused(remote net.Addr, err error) {
	peer, rs := door.Peer(remote), fmt.Sprint(remote)
	var ne net.Error
	var other *otherClusterError
	switch {
	case errors.As(err, &other) && other.theirs == "":
		s.counts.Add(boundRaftOtherCluster)
		s.refusals.Log(slog.LevelWarn, "no cluster", peer, "refused a Raft connection greeted with no cluster: this node has one "+
			"(a node still founding, or a stranger with a server certificate of the CA)", "remote", rs, "own_cluster", other.ours)
	case errors.As(err, &other):
		s.counts.Add(boundRaftOtherCluster)
		s.refusals.Log(slog.LevelError, "other cluster", peer,
			"refused Raft traffic from another cluster (a leader still dialling an old member's address?)",
			"remote", rs, "their_cluster", other.theirs, "own_cluster", other.ours)
	case errors.Is(err, door.ErrTooMany):
		s.counts.Add(boundRaftConns)
		s.refusals.Log(slog.LevelWarn, "cap", peer, "refused a Raft connection: the port holds its cap of open connections",
			"remote", rs, "cap", raftMaxConns)
	case errors.Is(err, door.ErrEvicted):
		s.counts.Add(boundRaftHandshakes)
		s.refusals.Log(slog.LevelWarn, "pending", peer, "closed an unfinished Raft handshake: too many at once",
			"remote", rs, "cap", raftMaxPending)
	case errors.As(err, &ne) && ne.Timeout():
		s.counts.Add(boundRaftTimeout)
		s.refusals.Log(slog.LevelWarn, "timeout", peer, "closed a Raft connection that did not finish its handshake in time",
			"remote", rs, "bound", raftHandshakeTimeout.String(), "err", err)
	case errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed):
		s.refusals.Log(slog.LevelDebug, "closed", peer, "a Raft connection closed before its handshake", "remote", rs)
	case errors.Is(err, errRaftTLS):
		s.counts.Add(boundRaftTLS)
		s.refusals.Log(slog.LevelWarn, "tls", peer, "refused a Raft connection: TLS handshake failed (not a server of this cluster's CA?)",
			"remote", rs, "err", err)
	case errors.Is(err, errNoGreeting):
		s.counts.Add(boundRaftGreeting)
		s.refusals.Log(slog.LevelWarn, "greeting", peer, "refused a Raft connection: no idgen Raft greeting",
			"remote", rs)
	default:
		s.refusals.Log(slog.LevelWarn, "other", peer, "refused a Raft connection", "remote", rs, "err", err)
	}
}

// greetedConn hands Raft the bytes after the greeting, for as long as the
// node admits the cluster it named (raftGreeter.admits). Raft reads each
// connection from one goroutine, so settled needs no lock.
type greetedConn struct {
	net.Conn
	r       *bufio.Reader
	theirs  string
	layer   *clusterStreamLayer
	settled bool // the node had a cluster and admitted theirs: final
}

// check asks the node whether it still admits the connection.
func (c *greetedConn) check() error {
	if c.settled {
		return nil
	}
	ours := c.layer.greeter.own()
	ok, final := admits(ours, c.theirs, c.layer.greeter.alone())
	if !ok {
		return &otherClusterError{remote: c.RemoteAddr().String(), theirs: c.theirs, ours: ours}
	}
	c.settled = final
	return nil
}

func (c *greetedConn) Read(p []byte) (int, error) {
	if err := c.check(); err != nil {
		// Taken before this node had a cluster: routine after a founding
		// (a fellow founder dials again, naming the cluster now), so only
		// a connection of another cluster is worth a line.
		if c.theirs == "" {
			c.layer.refusals.Log(slog.LevelDebug, "before cluster", door.Peer(c.RemoteAddr()),
				"closed a Raft connection greeted before this node had a cluster; it is dialled again", "remote", fmt.Sprint(c.RemoteAddr()))
		} else {
			c.layer.refused(c.RemoteAddr(), err)
		}
		c.Conn.Close()
		// Raft logs every read error but EOF at ERROR; refused has
		// logged this one, rate-limited.
		return 0, io.EOF
	}
	return c.r.Read(p)
}
