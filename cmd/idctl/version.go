package main

import (
	"context"
	"fmt"

	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/rpc/buildinfo"
	"github.com/idgen/idgen/rpc/idclient"
)

// nodeVersion is one node's answer to `idctl version`.
type nodeVersion struct {
	Addr      string `json:"addr"`
	Name      string `json:"name,omitempty"`
	Version   string `json:"version,omitempty"`
	Revision  string `json:"revision,omitempty"`
	GoVersion string `json:"go_version,omitempty"`
	Protocols string `json:"protocols,omitempty"`
	Error     string `json:"error,omitempty"`
}

// runVersion prints idctl's own build and each target node's, from Status:
// during a rolling upgrade it shows which nodes run which build.
func runVersion(ctx context.Context, g globals, args []string, e env) error {
	if err := noArgs(args); err != nil {
		return err
	}
	self := buildinfo.Read()
	addrs, err := idclient.TargetAddrs(ctx, g.target)
	if err != nil {
		return usagef("%v", err)
	}
	var nodes []nodeVersion
	failed := 0
	for _, a := range addrs {
		ga := g
		ga.target = a
		st, err := callAdmin(ctx, ga, func(ctx context.Context, c idgenv1.ClusterServiceClient) (*idgenv1.StatusResponse, error) {
			return c.Status(ctx, &idgenv1.StatusRequest{})
		})
		if err != nil {
			failed++
			nodes = append(nodes, nodeVersion{Addr: a, Error: describe(err)})
			continue
		}
		nodes = append(nodes, nodeVersion{Addr: a, Name: st.GetName(), Version: st.GetVersion(), Revision: st.GetRevision(), GoVersion: st.GetGoVersion(),
			Protocols: protocolText(st.GetProtocolMin(), st.GetProtocolMax())})
	}
	if g.json {
		err = printJSON(e.stdout, struct {
			Client nodeVersion   `json:"client"`
			Nodes  []nodeVersion `json:"nodes"`
		}{nodeVersion{Version: self.Version, Revision: self.Revision, GoVersion: self.GoVersion}, nodes})
	} else {
		fmt.Fprintf(e.stdout, "idctl %s\n", self)
		tw := table(e.stdout)
		fmt.Fprintln(tw, "NODE\tADDRESS\tVERSION\tREVISION\tGO\tPROTOCOLS")
		for _, n := range nodes {
			if n.Error != "" {
				fmt.Fprintf(tw, "-\t%s\tunreachable: %s\t\t\t\n", n.Addr, n.Error)
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.Addr, n.Version, n.Revision, n.GoVersion, n.Protocols)
		}
		err = tw.Flush()
	}
	if err == nil && failed > 0 {
		err = fmt.Errorf("%d of %d nodes did not answer", failed, len(addrs))
	}
	return err
}
