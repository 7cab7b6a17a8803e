package idcheck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/idgen/idgen/generator"
	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/rpc/idclient"
)

// History is the merged grant history of a cluster.
type History struct {
	Tenures []generator.Tenure
	// Disagreements describes tenures the nodes' views disagree on
	// (MergeTenures); each is a containment violation.
	Disagreements []string
	// Owners maps each node name the nodes reported (Members, Status) to
	// the node IDs that went by it: a node wiped and restarted under the
	// same name has two. The checker attributes IDs by the name a response
	// carries and the tenures by node ID.
	Owners map[string][]string
	// Layout is the cluster's layout as the nodes report it.
	Layout generator.Layout
	// Answered counts the nodes whose History was merged; Errors holds the
	// others' errors.
	Answered int
	Errors   []error
}

// addOwner records that node ID id went by name.
func addOwner(owners map[string][]string, name, id string) {
	if !slices.Contains(owners[name], id) {
		owners[name] = append(owners[name], id)
	}
}

// mergeOwners adds src's names and IDs to dst.
func mergeOwners(dst, src map[string][]string) {
	for name, ids := range src {
		for _, id := range ids {
			addOwner(dst, name, id)
		}
	}
}

// mergeHistory joins a later fetch of the history into an earlier one.
func mergeHistory(earlier, later History) History {
	tenures, disagree := MergeTenures(earlier.Tenures, later.Tenures)
	later.Tenures = tenures
	for _, d := range slices.Concat(earlier.Disagreements, disagree) {
		if !slices.Contains(later.Disagreements, d) {
			later.Disagreements = append(later.Disagreements, d)
		}
	}
	if later.Owners == nil {
		later.Owners = map[string][]string{}
	}
	mergeOwners(later.Owners, earlier.Owners)
	return later
}

// nodeView is what one node's ClusterService says.
type nodeView struct {
	tenures []generator.Tenure
	layout  string
	owners  map[string][]string
	err     error
}

// askAll asks every address at once (a paused node costs one timeout, not
// one each) for its members and own name and, with history, its History.
func askAll(ctx context.Context, addrs []string, timeout time.Duration, creds grpc.DialOption, history bool) []nodeView {
	views := make([]nodeView, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			views[i] = askNode(ctx, addr, timeout, creds, history)
		}()
	}
	wg.Wait()
	return views
}

func askNode(ctx context.Context, addr string, timeout time.Duration, creds grpc.DialOption, history bool) nodeView {
	v := nodeView{owners: map[string][]string{}}
	conn, err := grpc.NewClient(addr, creds)
	if err != nil {
		v.err = err
		return v
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cs := idgenv1.NewClusterServiceClient(conn)
	members, err := cs.Members(ctx, &idgenv1.MembersRequest{})
	if err != nil {
		v.err = fmt.Errorf("members: %w", err)
		return v
	}
	for _, m := range members.GetMembers() {
		addOwner(v.owners, m.GetName(), m.GetId())
	}
	self, err := cs.Status(ctx, &idgenv1.StatusRequest{})
	if err != nil {
		v.err = fmt.Errorf("status: %w", err)
		return v
	}
	addOwner(v.owners, self.GetName(), self.GetId())
	if !history {
		return v
	}
	resp, err := cs.History(ctx, &idgenv1.HistoryRequest{})
	if err != nil {
		v.err = err
		return v
	}
	for _, t := range resp.GetTenures() {
		v.tenures = append(v.tenures, generator.Tenure{
			Slot: int(t.GetSlot()), NodeID: t.GetNodeId(), Floor: t.GetFloor(), Granted: t.GetGranted(),
			ClaimedIndex: t.GetClaimedIndex(), ReleasedIndex: t.GetReleasedIndex(),
		})
	}
	v.layout = resp.GetLayout()
	return v
}

// FetchHistory asks every address for ClusterService.History, Members and
// Status, all at once, and merges the answers (MergeTenures). It fails only
// when no node answers. Of opts, only the TLS options apply.
func FetchHistory(ctx context.Context, addrs []string, timeout time.Duration, opts ...idclient.Option) (History, error) {
	creds, err := idclient.TransportCredentials(opts...)
	if err != nil {
		return History{}, err
	}
	h := History{Owners: map[string][]string{}}
	var tenures [][]generator.Tenure
	layouts := map[string]bool{}
	for i, v := range askAll(ctx, addrs, timeout, creds, true) {
		if v.err != nil {
			h.Errors = append(h.Errors, fmt.Errorf("history from %s: %w", addrs[i], v.err))
			continue
		}
		h.Answered++
		tenures = append(tenures, v.tenures)
		layouts[v.layout] = true
		mergeOwners(h.Owners, v.owners)
	}
	if h.Answered == 0 {
		return h, fmt.Errorf("idcheck: no node answered History: %w", errors.Join(h.Errors...))
	}
	if len(layouts) != 1 {
		return h, fmt.Errorf("idcheck: nodes report different layouts %v", keys(layouts))
	}
	l, err := generator.ParseLayout(keys(layouts)[0])
	if err != nil {
		return h, err
	}
	h.Layout = l
	h.Tenures, h.Disagreements = MergeTenures(tenures...)
	return h, nil
}

// memberPollInterval is how often Verify asks the nodes for their members
// during the load, so that a name is known with every node ID that served
// under it, even one wiped or removed before the end.
const memberPollInterval = 2 * time.Second

// pollOwners records the nodes' names and IDs now and every
// memberPollInterval until ctx ends.
func pollOwners(ctx context.Context, addrs []string, timeout time.Duration, creds grpc.DialOption, into map[string][]string) {
	t := time.NewTicker(memberPollInterval)
	defer t.Stop()
	for {
		for _, v := range askAll(ctx, addrs, timeout, creds, false) {
			mergeOwners(into, v.owners)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
