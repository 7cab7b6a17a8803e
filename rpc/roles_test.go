package rpc

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"math/big"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/rpc/tlsconf"
)

// certWithURIs is a certificate signed by the CA in dir whose only SANs are
// the given URIs, written byte for byte into the extension (as an outside CA
// that issues by pattern might), ready for a client's tls.Config.
func certWithURIs(t *testing.T, dir string, uris ...string) tls.Certificate {
	t.Helper()
	ca, err := tls.LoadX509KeyPair(filepath.Join(dir, tlsconf.CAFile), filepath.Join(dir, tlsconf.CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	var names []asn1.RawValue
	for _, u := range uris {
		names = append(names, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 6, Bytes: []byte(u)}) // uniformResourceIdentifier [6]
	}
	san, err := asn1.Marshal(names)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:    big.NewInt(time.Now().UnixNano()),
		Subject:         pkix.Name{CommonName: "attacker"},
		NotBefore:       time.Now().Add(-time.Hour),
		NotAfter:        time.Now().Add(time.Hour),
		KeyUsage:        x509.KeyUsageDigitalSignature,
		ExtKeyUsage:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		ExtraExtensions: []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 17}, Value: san}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestRoleURIsMustBeExact: a certificate from the cluster's own CA whose role
// URI is anything but one of the three canonical ones (a query, a fragment,
// another case, user info, an escape), or that carries two role claims, is
// refused every call, admin and read-only alike, naming what is wrong. The
// canonical URI still works.
func TestRoleURIsMustBeExact(t *testing.T) {
	dir := testCA(t)
	ts := startServer(t, newFakeBackend(2), ServerConfig{TLS: material(t, dir, "server").ServerConfig()})
	pool := material(t, dir, "client").CAs
	call := func(cert tls.Certificate) (removeErr, idsErr error) {
		conn := dialTLS(t, ts.addr, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, RootCAs: pool})
		_, removeErr = idgenv1.NewClusterServiceClient(conn).Remove(ctxT(t), &idgenv1.RemoveRequest{Node: "n2"})
		_, idsErr = idgenv1.NewIDServiceClient(conn).GetIDBatch(ctxT(t), &idgenv1.GetIDBatchRequest{Count: 1})
		return removeErr, idsErr
	}
	for _, uris := range [][]string{
		{"idgen://role/admin?x=1"},
		{"idgen://role/admin#client"},
		{"IDGEN://role/admin"},
		{"Idgen://role/client"},
		{"idgen://x@role/admin"},
		{"idgen://role/%61dmin"},
		{"idgen://role/admin/"},
		{"idgen://role:443/admin"},
		{"idgen:role/admin"},
		{"idgen://ROLE/client", "idgen://role/admin"},
		{"idgen://role/client", "idgen://role/admin"},
		{"idgen://role/admin", "idgen://role/admin"},
	} {
		removeErr, idsErr := call(certWithURIs(t, dir, uris...))
		for what, err := range map[string]error{"Remove": removeErr, "GetIDBatch": idsErr} {
			if codeOf(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "role") {
				t.Errorf("%s with role URIs %q: %v, want PermissionDenied naming the role URI", what, uris, err)
			}
		}
	}
	// The canonical claims, beside URIs of other schemes, still work.
	if removeErr, _ := call(certWithURIs(t, dir, "spiffe://example.org/idgen", "idgen://role/admin")); removeErr != nil {
		t.Fatalf("canonical admin URI: Remove: %v", removeErr)
	}
	if removeErr, idsErr := call(certWithURIs(t, dir, "idgen://role/client")); idsErr != nil || codeOf(removeErr) != codes.PermissionDenied {
		t.Fatalf("canonical client URI: GetIDBatch %v, Remove %v (want nil, PermissionDenied)", idsErr, removeErr)
	}
}

// TestRolesByExactMethodName: the methods any certificate may call are
// matched by their full name. Methods whose names only begin like a
// read-only one (MembersRemove, StatusSet, HistoryPurge), or that sit in an
// open service (IDService, Health, reflection) without being listed, need
// admin, on a real TLS server running the same interceptors as a node.
func TestRolesByExactMethodName(t *testing.T) {
	dir := testCA(t)
	unlisted := map[string][]string{
		"idgen.v1.ClusterService": {"MembersRemove", "StatusSet", "HistoryPurge"},
		"idgen.v1.IDService":      {"Drain"},
		"grpc.health.v1.Health":   {"SetServingStatus"},
		"idgen.v1.PeerService":    {"ApplyAll"},
	}
	const streamMethod = "/grpc.reflection.v1.ServerReflection/Wipe"
	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(material(t, dir, "server").ServerConfig())),
		grpc.ChainUnaryInterceptor(authUnary()),
		grpc.ChainStreamInterceptor(authStream()),
	)
	for svc, methods := range unlisted {
		desc := grpc.ServiceDesc{ServiceName: svc, HandlerType: (*any)(nil)}
		for _, m := range methods {
			full := "/" + svc + "/" + m
			desc.Methods = append(desc.Methods, grpc.MethodDesc{MethodName: m,
				Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
					in := new(emptypb.Empty)
					if err := dec(in); err != nil {
						return nil, err
					}
					done := func(context.Context, any) (any, error) { return &emptypb.Empty{}, nil }
					if ic == nil {
						return done(ctx, in)
					}
					return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: full}, done)
				}})
		}
		srv.RegisterService(&desc, struct{}{})
	}
	srv.RegisterService(&grpc.ServiceDesc{ServiceName: "grpc.reflection.v1.ServerReflection", HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "Wipe", ServerStreams: true,
			Handler: func(any, grpc.ServerStream) error { return nil }}}}, struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	for _, role := range []string{"client", "server", "admin"} {
		conn := dialTLS(t, lis.Addr().String(), material(t, dir, role).ClientConfig())
		for svc, methods := range unlisted {
			for _, m := range methods {
				full := "/" + svc + "/" + m
				err := conn.Invoke(ctxT(t), full, &emptypb.Empty{}, &emptypb.Empty{})
				if role == "admin" {
					if err != nil {
						t.Errorf("%s with an admin certificate: %v", full, err)
					}
					continue
				}
				if codeOf(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "needs a certificate with role admin") {
					t.Errorf("%s with a %s certificate: %v, want PermissionDenied naming role admin", full, role, err)
				}
			}
		}
		st, err := conn.NewStream(ctxT(t), &grpc.StreamDesc{ServerStreams: true}, streamMethod)
		if err == nil {
			if err = st.SendMsg(&emptypb.Empty{}); err == nil {
				st.CloseSend()
				err = st.RecvMsg(&emptypb.Empty{})
			}
		}
		switch {
		case role == "admin" && codeOf(err) == codes.PermissionDenied:
			t.Errorf("stream %s with an admin certificate: %v", streamMethod, err)
		case role != "admin" && (codeOf(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "role admin")):
			t.Errorf("stream %s with a %s certificate: %v, want PermissionDenied naming role admin", streamMethod, role, err)
		}
	}
}

func codeOf(err error) codes.Code { return status.Code(err) }

// TestEveryServedMethodIsListed: every method a node serves has its own line
// in the role table, so none needs admin only by falling through, and the
// table lists nothing a node does not serve.
func TestEveryServedMethodIsListed(t *testing.T) {
	ts := startServer(t, newFakeBackend(1), ServerConfig{})
	served := map[string]bool{}
	for svc, info := range ts.srv.grpc.GetServiceInfo() {
		for _, m := range info.Methods {
			full := "/" + svc + "/" + m.Name
			served[full] = true
			if _, ok := methodRoles[full]; !ok {
				t.Errorf("%s is served but not in methodRoles (it falls through to admin); list it with the role it needs", full)
			}
		}
	}
	for full := range methodRoles {
		if !served[full] {
			t.Errorf("methodRoles lists %s, which the server does not serve", full)
		}
	}
}
