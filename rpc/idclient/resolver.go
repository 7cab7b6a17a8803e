package idclient

import (
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc/resolver"
)

// listScheme names the resolver for comma-separated address lists. It is
// passed to each ClientConn with grpc.WithResolvers, so nothing is registered
// globally.
const listScheme = "idgen-list"

// listBuilder resolves "idgen-list:///h1:p1,h2:p2" to those addresses, once:
// the list is static, and gRPC reconnects to each address on its own.
type listBuilder struct{}

func (listBuilder) Scheme() string { return listScheme }

func (listBuilder) Build(target resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	addrs, err := parseList(target.Endpoint())
	if err != nil {
		return nil, err
	}
	if err := cc.UpdateState(listState(addrs)); err != nil {
		return nil, fmt.Errorf("idclient: resolve %q: %w", target.Endpoint(), err)
	}
	return listResolver{}, nil
}

// listState is one endpoint per address.
func listState(addrs []string) resolver.State {
	state := resolver.State{Endpoints: make([]resolver.Endpoint, 0, len(addrs))}
	for _, a := range addrs {
		// Each address is its own TLS server name: the list as a whole is
		// no host name a certificate could carry.
		host, _, _ := net.SplitHostPort(a)
		addr := resolver.Address{Addr: a, ServerName: host}
		state.Endpoints = append(state.Endpoints, resolver.Endpoint{Addresses: []resolver.Address{addr}})
		state.Addresses = append(state.Addresses, addr)
	}
	return state
}

func parseList(list string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		if a == "" || seen[a] {
			continue
		}
		if !strings.Contains(a, ":") {
			return nil, fmt.Errorf("idclient: address %q has no port; write host:port", a)
		}
		seen[a] = true
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("idclient: no addresses in target %q", list)
	}
	return out, nil
}

type listResolver struct{}

func (listResolver) ResolveNow(resolver.ResolveNowOptions) {}
func (listResolver) Close()                                {}
