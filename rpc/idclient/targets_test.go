package idclient

import (
	"context"
	"slices"
	"strings"
	"testing"
)

func TestTargetAddrs(t *testing.T) {
	got, err := TargetAddrs(context.Background(), "a:1, b:2,a:1")
	if err != nil || !slices.Equal(got, []string{"a:1", "b:2"}) {
		t.Fatalf("list: %v %v", got, err)
	}
	got, err = TargetAddrs(context.Background(), "dns:///localhost:50051")
	if err != nil || len(got) == 0 || !strings.HasSuffix(got[0], ":50051") {
		t.Fatalf("dns: %v %v", got, err)
	}
	if _, err := TargetAddrs(context.Background(), "unix:///tmp/x"); err == nil {
		t.Fatal("unix target listed")
	}
}
