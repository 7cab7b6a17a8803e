package main

import (
	"encoding/base64"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConfigDefaults(t *testing.T) {
	c, err := parseConfig(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "./data" || c.GRPCAddr != "127.0.0.1:50051" || c.RaftAddr != "127.0.0.1:50052" || c.GossipAddr != "127.0.0.1:7946" ||
		c.HTTPAddr != "127.0.0.1:9090" || c.ClusterName != "idgen" || c.Insecure || c.TLS.Enabled() || len(c.GossipKeys) != 0 || c.BootstrapExpect != 1 || c.Datacenter != -1 || c.Lead != 10*time.Second ||
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

// TestConfigExposure: plaintext on a non-loopback bind is refused with a
// message naming --insecure and the TLS flags; TLS plus a gossip key, or
// --insecure, allow it; loopback never needs either.
func TestConfigExposure(t *testing.T) {
	key := base64.StdEncoding.EncodeToString(make([]byte, 32))
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "gossip.key")
	if err := os.WriteFile(keyFile, []byte(key+"\n"+key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsFlags := []string{"--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-ca", "ca.pem"}
	for _, tc := range []struct {
		args []string
		want string // "" means accepted
	}{
		{[]string{"--grpc-addr", "0.0.0.0:50051"}, "--insecure"},
		{[]string{"--raft-addr", ":50052"}, "--tls-cert"},
		{[]string{"--gossip-addr", "10.0.0.1:7946"}, "--insecure"},
		{[]string{"--grpc-addr", "0.0.0.0:50051", "--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-ca", "ca.pem"}, "--gossip-key"},
		{[]string{"--grpc-addr", "0.0.0.0:50051", "--gossip-key", key}, "--insecure"},
		{append([]string{"--grpc-addr", "0.0.0.0:50051", "--gossip-key", key}, tlsFlags...), ""},
		{append([]string{"--grpc-addr", "0.0.0.0:50051", "--gossip-key-file", keyFile}, tlsFlags...), ""},
		{[]string{"--grpc-addr", "0.0.0.0:50051", "--insecure"}, ""},
		{[]string{"--grpc-addr", "localhost:50051"}, ""},
		{[]string{"--tls-cert", "c.pem"}, "all three"},
		{[]string{"--gossip-key", "c2hvcnQ="}, "16, 24 or 32 bytes"},
		{[]string{"--gossip-key", "not base64!"}, "base64"},
		{[]string{"--gossip-key", key, "--gossip-key-file", keyFile}, "give one of them"},
		{[]string{"--cluster-name", "a b"}, "--cluster-name"},
	} {
		c, err := parseConfig(tc.args, func(string) string { return "" }, io.Discard)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: refused: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: err %v, want one naming %q", tc.args, err, tc.want)
		case tc.want == "" && strings.Contains(strings.Join(tc.args, " "), "gossip-key-file") && len(c.GossipKeys) != 2:
			t.Errorf("%v: %d keys from the file, want 2", tc.args, len(c.GossipKeys))
		}
	}
}
