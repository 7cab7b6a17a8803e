package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestConfigDefaults(t *testing.T) {
	c, err := parseConfig(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "./data" || c.GRPCAddr != ":50051" || c.RaftAddr != ":50052" || c.GossipAddr != ":7946" ||
		c.HTTPAddr != ":9090" || c.BootstrapExpect != 1 || c.Datacenter != -1 || c.Lead != 10*time.Second ||
		c.MaxAhead != 0 || c.MaxSkew != 5*time.Second || c.ReapAfter != 2*time.Minute || c.GossipProfile != "lan" ||
		c.EnableFaultInjection || c.ShutdownTimeout != 5*time.Second || c.LogFormat != "text" {
		t.Fatalf("defaults %+v", c)
	}
}

func TestConfigEnvAndFlagPrecedence(t *testing.T) {
	env := map[string]string{
		"IDGEN_DATA_DIR":               "/env/data",
		"IDGEN_BOOTSTRAP_EXPECT":       "3",
		"IDGEN_JOIN":                   "a:1, b:2",
		"IDGEN_ENABLE_FAULT_INJECTION": "true",
		"IDGEN_LEAD":                   "20s",
	}
	c, err := parseConfig([]string{"--bootstrap-expect", "5"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "/env/data" || c.BootstrapExpect != 5 || strings.Join(c.Join, ";") != "a:1;b:2" ||
		!c.EnableFaultInjection || c.Lead != 20*time.Second {
		t.Fatalf("config %+v", c)
	}
}

func TestAdvertiseHost(t *testing.T) {
	for _, tc := range []struct{ adv, bind, want string }{
		{"10.1.2.3", ":50051", "10.1.2.3"},
		{"", "127.0.0.1:50051", "127.0.0.1"},
		{"", "192.168.5.6:7946", "192.168.5.6"},
		{"localhost", ":1", "127.0.0.1"},
	} {
		got, err := advertiseHost(tc.adv, tc.bind)
		if err != nil || got != tc.want {
			t.Errorf("advertiseHost(%q, %q) = %q, %v; want %q", tc.adv, tc.bind, got, err, tc.want)
		}
	}
	// Unspecified bind: some IPv4 address, never empty or IPv6.
	got, err := advertiseHost("", ":50051")
	if err != nil || got == "" || strings.Contains(got, ":") {
		t.Fatalf("advertiseHost for :50051 = %q, %v", got, err)
	}
}
