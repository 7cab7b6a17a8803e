package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
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

// errOtherCluster: a Raft connection from a member of another cluster.
var errOtherCluster = errors.New("raft connection from another cluster refused")

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

// clusterStreamLayer greets every dialled connection with this node's
// cluster ID and refuses accepted connections whose greeting names another
// cluster. An empty ID (a node whose cluster is not known yet, as during a
// first bootstrap) matches any.
type clusterStreamLayer struct {
	raft.StreamLayer
	cluster func() string
	logger  *slog.Logger
	warned  sync.Map // other cluster ID -> struct{}: log each once
}

func (s *clusterStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := s.StreamLayer.Dial(address, timeout)
	if err != nil {
		return nil, err
	}
	_ = c.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintf(c, "%s%s\n", raftGreeting, s.cluster()); err != nil {
		c.Close()
		return nil, fmt.Errorf("raft greeting to %s: %w", address, err)
	}
	_ = c.SetWriteDeadline(time.Time{})
	return c, nil
}

func (s *clusterStreamLayer) Accept() (net.Conn, error) {
	c, err := s.StreamLayer.Accept()
	if err != nil {
		return nil, err
	}
	// The greeting is checked on the first Read, in the connection's own
	// goroutine, so a silent peer cannot hold up the accept loop.
	return &greetedConn{Conn: c, layer: s}, nil
}

// greetedConn checks the peer's greeting before handing any byte to Raft.
type greetedConn struct {
	net.Conn
	layer *clusterStreamLayer
	once  sync.Once
	err   error
	r     *bufio.Reader
}

func (c *greetedConn) Read(p []byte) (int, error) {
	c.once.Do(func() { c.err = c.checkGreeting() })
	if c.err != nil {
		return 0, c.err
	}
	return c.r.Read(p)
}

func (c *greetedConn) checkGreeting() error {
	c.r = bufio.NewReader(c.Conn)
	var line []byte
	for len(line) <= maxGreetingLine {
		b, err := c.r.ReadByte()
		if err != nil {
			return fmt.Errorf("raft greeting from %s: %w", c.RemoteAddr(), err)
		}
		if b == '\n' {
			break
		}
		line = append(line, b)
	}
	theirs, ok := strings.CutPrefix(string(line), raftGreeting)
	if !ok || len(line) > maxGreetingLine {
		return fmt.Errorf("%w: %s sent no idgen Raft greeting", errOtherCluster, c.RemoteAddr())
	}
	ours := c.layer.cluster()
	if theirs == "" || ours == "" || theirs == ours {
		return nil
	}
	if _, seen := c.layer.warned.LoadOrStore(theirs, struct{}{}); !seen {
		c.layer.logger.Error("refused Raft traffic from another cluster (a leader still dialling an old member's address?)",
			"remote", c.RemoteAddr().String(), "their_cluster", theirs, "own_cluster", ours)
	}
	return fmt.Errorf("%w: %s belongs to cluster %s, this node to %s", errOtherCluster, c.RemoteAddr(), theirs, ours)
}
