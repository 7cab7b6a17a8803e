package idclient

import (
	"context"
	"fmt"
	"net"
	"strings"
)

// TargetAddrs lists the node addresses of a target, in the forms Dial takes:
// each entry of "host:port,host:port", the seeds of "idgen:///seed:port,…",
// or every address DNS returns for "dns:///name:port". It is for callers that
// ask each node in turn rather than through a Client's balancer, such as
// idctl's version and history commands and the checker in rpc/idcheck.
func TargetAddrs(ctx context.Context, target string) ([]string, error) {
	target = strings.TrimSpace(target)
	if rest, ok := strings.CutPrefix(target, "dns:///"); ok {
		host, port, err := net.SplitHostPort(rest)
		if err != nil {
			return nil, fmt.Errorf("idclient: target %q: %w", target, err)
		}
		hosts, err := net.DefaultResolver.LookupHost(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("idclient: target %q: %w", target, err)
		}
		out := make([]string, 0, len(hosts))
		for _, h := range hosts {
			out = append(out, net.JoinHostPort(h, port))
		}
		return out, nil
	}
	if seeds, ok := strings.CutPrefix(target, FollowPrefix); ok {
		return parseList(seeds) // every node holds the whole Raft log
	}
	if strings.Contains(target, "://") {
		return nil, fmt.Errorf("idclient: cannot list the addresses of target %q; use host:port,…, idgen:///seed:port,… or dns:///name:port", target)
	}
	return parseList(target)
}
