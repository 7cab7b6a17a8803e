package rpc

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/generator"
	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
)

type idService struct {
	idgenv1.UnimplementedIDServiceServer
	s *Server
}

// GetIDBatch serves count 0 (or the default size) from the prefetch buffer and
// mints any other count directly.
func (h *idService) GetIDBatch(ctx context.Context, req *idgenv1.GetIDBatchRequest) (*idgenv1.GetIDBatchResponse, error) {
	s := h.s
	n := int(req.GetCount())
	if n > s.cfg.MaxCount {
		return nil, status.Errorf(codes.InvalidArgument,
			"count %d is over the maximum of %d IDs per call: ask for at most %d, or 0 for the node's default of %d",
			n, s.cfg.MaxCount, s.cfg.MaxCount, s.cfg.BatchSize)
	}
	want := n
	if want == 0 {
		want = s.cfg.BatchSize
	}
	if err := s.idRate.admit(ctx, want); err != nil {
		return nil, err
	}
	var (
		ids    []int64
		slot   int
		err    error
		source = "direct"
	)
	if n == 0 || n == s.cfg.BatchSize {
		source = "buffer"
		ids, slot, err = s.takeBuffered(ctx)
	} else {
		ids, slot, err = s.nextBatch(ctx, n)
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			// The caller's deadline passed while waiting for IDs: no room.
			err = fmt.Errorf("%w: %w", errNoRoom, err)
		}
		return nil, ToStatus(err)
	}
	if slot < 0 {
		return nil, status.Errorf(codes.Internal, "minted %d IDs without a slot", len(ids))
	}
	// The IDs were minted under the cluster's layout, so it is known.
	layout, err := s.layoutForSlot()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "minted %d IDs but %v", len(ids), err)
	}
	s.metrics.idsIssued.Add(float64(len(ids)))
	s.metrics.batchesServed.WithLabelValues(source).Inc()
	return &idgenv1.GetIDBatchResponse{Ids: ids, Slot: uint32(slot), Node: s.cfg.NodeName, NodeId: s.cfg.NodeID, Layout: layout.text}, nil
}

// takeBuffered takes one batch from the buffer, as generator.TakeRuleFor
// decides: a node that met an older cluster drops its buffer and hands out
// nothing (its window may overlap the older cluster's); a ready one waits for
// a batch as long as the caller does; one that is not ready hands out what
// it has buffered (minted inside a granted window, so still safe), waiting
// only notReadyTakeWait, and otherwise answers Unavailable so the client
// retries another node. Either way a batch minted in a tenure that has ended
// since is dropped, never handed out (Issuer.Withdrawn).
func (s *Server) takeBuffered(ctx context.Context) ([]int64, int, error) {
	conflict := s.issuer.Conflict()
	ready, reason := s.issuer.Ready()
	switch generator.TakeRuleFor(conflict != nil, ready, s.buf.Len()) {
	case generator.TakeDrop:
		s.buf.Drain()
		return nil, -1, conflict
	case generator.TakeWait:
		_, identity := callerOf(ctx)
		for {
			ids, err := s.fair.take(ctx, identity)
			if err != nil {
				return nil, -1, err
			}
			if !s.withdrawn(ids) {
				return s.withSlot(ids)
			}
		}
	}
	notReady := fmt.Errorf("%w: %s", cluster.ErrNotReady, reason)
	short, cancel := context.WithTimeout(ctx, notReadyTakeWait)
	defer cancel()
	for {
		if s.buf.Len() == 0 { // TakeRefuse, or the buffer emptied meanwhile
			return nil, -1, notReady
		}
		ids, err := s.buf.Take(short)
		if err != nil {
			if ctx.Err() != nil {
				return nil, -1, err
			}
			return nil, -1, notReady
		}
		if !s.withdrawn(ids) {
			return s.withSlot(ids)
		}
	}
}

// withdrawn drops a buffered batch minted in a tenure that has ended
// (Issuer.Withdrawn of its first, lowest ID), counting its IDs.
func (s *Server) withdrawn(ids []int64) bool {
	if len(ids) == 0 || !s.issuer.Withdrawn(ids[0]) {
		return false
	}
	s.metrics.withdrawn.Add(float64(len(ids)))
	return true
}

// withSlot recovers the slot a buffered batch was minted with from its first
// ID; all IDs of one batch share it.
func (s *Server) withSlot(ids []int64) ([]int64, int, error) {
	if len(ids) == 0 {
		return nil, -1, errors.New("empty batch in the prefetch buffer")
	}
	layout, err := s.layoutForSlot()
	if err != nil {
		return nil, -1, fmt.Errorf("decode slot of buffered batch: %w", err)
	}
	parts, err := layout.layout.Decompose(ids[0])
	if err != nil {
		return nil, -1, fmt.Errorf("decode slot of buffered batch: %w", err)
	}
	return ids, parts.Slot, nil
}
