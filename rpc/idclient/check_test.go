package idclient

import (
	"errors"
	"testing"

	"github.com/idgen/idgen/generator"
	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
)

func TestCheckBatchRejectsWrongAnswers(t *testing.T) {
	l := generator.DefaultLayout()
	id := func(ts int64, slot int, seq int64) int64 {
		v, err := l.Compose(ts, slot, seq)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	good := &idgenv1.GetIDBatchResponse{Ids: []int64{id(5, 3, 0), id(5, 3, 1)}, Slot: 3, Node: "n"}
	if err := checkBatch(good, 2, newKnownLayout(l, "")); err != nil {
		t.Fatalf("good batch refused: %v", err)
	}
	if err := checkBatch(good, 0, newKnownLayout(l, "")); err != nil {
		t.Fatalf("default-size batch refused: %v", err)
	}
	for name, tc := range map[string]struct {
		resp  *idgenv1.GetIDBatchResponse
		count int
	}{
		"empty":          {&idgenv1.GetIDBatchResponse{Slot: 3}, 0},
		"short":          {good, 3},
		"other slot":     {&idgenv1.GetIDBatchResponse{Ids: []int64{id(5, 2, 0)}, Slot: 3}, 1},
		"negative":       {&idgenv1.GetIDBatchResponse{Ids: []int64{-1}, Slot: 0}, 1},
		"outside layout": {&idgenv1.GetIDBatchResponse{Ids: []int64{l.MaxID() + 1}, Slot: 0}, 1},
		// A pool would hand a repeated ID to several callers; generators mint
		// strictly increasing batches.
		"repeated":            {&idgenv1.GetIDBatchResponse{Ids: []int64{id(5, 3, 4), id(5, 3, 4), id(5, 3, 4)}, Slot: 3}, 3},
		"repeated, default":   {&idgenv1.GetIDBatchResponse{Ids: []int64{id(5, 3, 4), id(5, 3, 5), id(5, 3, 5)}, Slot: 3}, 0},
		"decreasing":          {&idgenv1.GetIDBatchResponse{Ids: []int64{id(5, 3, 1), id(5, 3, 0)}, Slot: 3}, 2},
		"other slot, last ID": {&idgenv1.GetIDBatchResponse{Ids: []int64{id(5, 3, 0), id(5, 3, 1), id(6, 4, 0)}, Slot: 3}, 3},
	} {
		if err := checkBatch(tc.resp, tc.count, newKnownLayout(l, "")); !errors.Is(err, ErrBadBatch) {
			t.Errorf("%s: got %v, want ErrBadBatch", name, err)
		}
	}
}
