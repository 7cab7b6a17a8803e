package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"time"

	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/rpc/idclient"
)

// protocolText is a protocol range as idctl prints it; a node of a release
// before protocol 2 advertises none and speaks 1.
func protocolText(lo, hi uint32) string {
	switch {
	case lo == 0 && hi == 0:
		return "1"
	case lo == hi:
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d..%d", lo, hi)
}

// stopNode is one member as safe-to-stop judges it.
type stopNode struct {
	Name      string `json:"name"`
	ID        string `json:"id"`
	RaftRole  string `json:"raft_role"`
	Ready     bool   `json:"ready"`
	Reason    string `json:"reason,omitempty"`
	Version   string `json:"version,omitempty"`
	Revision  string `json:"revision,omitempty"`
	Protocols string `json:"protocols"`
}

// stopVerdict is safe-to-stop's answer.
type stopVerdict struct {
	Node            string     `json:"node"`
	Safe            bool       `json:"safe"`
	Why             string     `json:"why"`
	ClusterProtocol uint32     `json:"cluster_protocol"`
	Members         []stopNode `json:"members"`
}

func bindSafeToStop(fs *flag.FlagSet) runner {
	wait := fs.Duration("wait", 0, "keep asking until it is safe, for at most this long (0: answer once)")
	return func(ctx context.Context, g globals, args []string, e env) error {
		if len(args) != 1 {
			return usagef("safe-to-stop takes exactly one node ID or name (see idctl members)")
		}
		deadline := time.Now().Add(*wait)
		for {
			v, err := judgeStop(ctx, g, args[0])
			var ue usageError
			if err != nil && (errors.As(err, &ue) || !time.Now().Add(time.Second).Before(deadline)) {
				return err
			}
			if err != nil {
				// No target address answered (the node just restarted may be
				// the first of them): ask again while --wait lasts.
				fmt.Fprintf(e.stderr, "idctl safe-to-stop: %v; asking again\n", err)
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Second):
				}
				continue
			}
			if v.Safe || !time.Now().Add(time.Second).Before(deadline) {
				if perr := printVerdict(g, e, v); perr != nil {
					return perr
				}
				if !v.Safe {
					return errors.New("not safe to stop " + args[0] + ": " + v.Why)
				}
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
	}
}

func printVerdict(g globals, e env, v stopVerdict) error {
	if g.json {
		return printJSON(e.stdout, v)
	}
	tw := table(e.stdout)
	fmt.Fprintln(tw, "NAME\tRAFT\tREADY\tVERSION\tPROTOCOLS")
	for _, m := range v.Members {
		ready := "yes"
		if !m.Ready {
			ready = "no: " + m.Reason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", orDash(m.Name), m.RaftRole, ready, versionText(m.Version, m.Revision), m.Protocols)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	verdict := "safe"
	if !v.Safe {
		verdict = "NOT safe"
	}
	_, err := fmt.Fprintf(e.stdout, "cluster protocol %d; %s to stop %s: %s\n", v.ClusterProtocol, verdict, v.Node, v.Why)
	return err
}

func versionText(version, revision string) string {
	switch {
	case version == "" && revision == "":
		return "-"
	case revision == "":
		return version
	}
	return version + " " + revision
}

// judgeStop asks every server of the cluster for its Status, each at its
// own gRPC address, and says whether node may be stopped now: every other
// server answers ready (none is starting, restarting or cut off), and the
// voters that stay ready without it are a quorum of all voters.
func judgeStop(ctx context.Context, g globals, node string) (stopVerdict, error) {
	addrs, err := idclient.TargetAddrs(ctx, g.target)
	if err != nil {
		return stopVerdict{}, usagef("%v", err)
	}
	// The members list from the first target address that answers and
	// knows node: the node just restarted, or the one to stop, may be the
	// first, and one just restarted may not have met the others yet.
	var ms *idgenv1.MembersResponse
	for _, a := range addrs {
		ga := g
		ga.target = a
		got, cerr := callAdmin(ctx, ga, func(ctx context.Context, c idgenv1.ClusterServiceClient) (*idgenv1.MembersResponse, error) {
			return c.Members(ctx, &idgenv1.MembersRequest{})
		})
		if cerr != nil {
			err = cerr
			continue
		}
		ms = got
		if slices.ContainsFunc(got.GetMembers(), func(m *idgenv1.Member) bool { return m.GetId() == node || m.GetName() == node }) {
			break
		}
	}
	if ms == nil {
		return stopVerdict{}, fmt.Errorf("no target address answered: %s", describe(err))
	}
	v := stopVerdict{Node: node, Members: []stopNode{}}
	var target *idgenv1.Member
	for _, m := range ms.GetMembers() {
		if m.GetId() == node || m.GetName() == node {
			if target != nil {
				return v, usagef("name %q is ambiguous; use the node ID (idctl members)", node)
			}
			target = m
		}
	}
	if target == nil {
		return v, usagef("no member has ID or name %q (idctl members)", node)
	}
	voters, readyVoters := 0, 0
	var notReady []string
	for _, m := range ms.GetMembers() {
		role := m.GetRaftRole()
		if role == "none" {
			continue // a standby or a departed node: not a server
		}
		sn := stopNode{Name: m.GetName(), ID: m.GetId(), RaftRole: role}
		ga := g
		ga.target = m.GetGrpcAddr()
		st, err := callAdmin(ctx, ga, func(ctx context.Context, c idgenv1.ClusterServiceClient) (*idgenv1.StatusResponse, error) {
			return c.Status(ctx, &idgenv1.StatusRequest{})
		})
		switch {
		case m.GetGrpcAddr() == "":
			sn.Reason = "no gRPC address known"
		case err != nil:
			sn.Reason = "unreachable: " + describe(err)
		case st.GetId() != m.GetId():
			sn.Reason = fmt.Sprintf("another node (%s) answers at %s", st.GetId(), m.GetGrpcAddr())
		default:
			sn.Ready, sn.Reason = st.GetReady(), st.GetReason()
			sn.Version, sn.Revision = st.GetVersion(), st.GetRevision()
			sn.Protocols = protocolText(st.GetProtocolMin(), st.GetProtocolMax())
			if st.GetRaftState() == "Leader" || v.ClusterProtocol == 0 {
				v.ClusterProtocol = max(st.GetClusterProtocol(), 1)
			}
		}
		if sn.Protocols == "" {
			sn.Protocols = protocolText(m.GetProtocolMin(), m.GetProtocolMax())
		}
		isVoter := role == "voter" || role == "leader"
		if isVoter {
			voters++
		}
		if m.GetId() != target.GetId() {
			if sn.Ready && isVoter {
				readyVoters++
			}
			// A voter not ready may be restarting; a non-voter (a standby,
			// a node not yet promoted) serves nobody's quorum.
			if !sn.Ready && isVoter {
				notReady = append(notReady, fmt.Sprintf("%s is not ready (%s)", orDash(sn.Name), sn.Reason))
			}
		}
		v.Members = append(v.Members, sn)
	}
	quorum := voters/2 + 1
	switch {
	case len(notReady) > 0:
		v.Why = fmt.Sprintf("another voter is not serving: %s; wait for it (a node restarting takes seconds), then ask again; "+
			"one that stays not ready for another reason must be fixed, or removed (idctl remove), first", notReady[0])
	case readyVoters < quorum:
		v.Why = fmt.Sprintf("only %d of %d voters would stay ready, a quorum needs %d", readyVoters, voters, quorum)
	default:
		v.Safe = true
		v.Why = fmt.Sprintf("every other server is ready and %d of %d voters stay (a quorum is %d)", readyVoters, voters, quorum)
	}
	return v, nil
}
